/* print.c - the shortest round-trip number printer (Python's repr() of a
 * float) and the JSON string and number writers, shared by every report:
 * the audit's, tk_compare_format, the pipeline trace and the bench receipt. */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tk__repr(double v, char *buf)
{
    if (isnan(v)) {
        strcpy(buf, "nan");
        return;
    }
    if (isinf(v) || v == 0.0) {
        strcpy(buf, isinf(v) ? (v < 0 ? "-inf" : "inf") : signbit(v) ? "-0.0" : "0.0");
        return;
    }
    /* The fewest significant digits that read back exactly. */
    char e[40], digits[20];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, v);
        if (strtod(e, NULL) == v)
            break;
    }
    const char *s = e + (v < 0);
    int nd = 0;
    for (; *s != 'e'; s++)
        if (*s != '.')
            digits[nd++] = *s;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    int x = atoi(s + 1);  /* v = d.ddd x 10^x */
    char *o = buf;
    if (v < 0)
        *o++ = '-';
    if (x < -4 || x >= 16) {  /* Python switches to exponent form here */
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)nd - 1);
            o += nd - 1;
        }
        sprintf(o, "e%c%02d", x < 0 ? '-' : '+', abs(x));
        return;
    }
    if (x < 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -x - 1; i++)
            *o++ = '0';
        memcpy(o, digits, (size_t)nd);
        o += nd;
    } else {
        for (int i = 0; i <= x; i++)
            *o++ = i < nd ? digits[i] : '0';
        *o++ = '.';
        if (nd > x + 1) {
            memcpy(o, digits + x + 1, (size_t)(nd - x - 1));
            o += nd - x - 1;
        } else {
            *o++ = '0';
        }
    }
    *o = '\0';
}

int tk_format_number(double v, char *buf, size_t size)
{
    char s[32];
    if (!buf)
        return tk__fail(TK_EINVAL, "tk_format_number: buf must not be NULL");
    tk__repr(v, s);
    size_t n = strlen(s) + 1;
    if (size < n)
        return tk__fail(TK_ERANGE, "tk_format_number: %s needs %zu bytes, size is %zu", s,
                        n, size);
    memcpy(buf, s, n);
    return TK_OK;
}

void tk__json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

tk__num tk__jn(double v)
{
    tk__num n;
    if (isfinite(v))
        tk__repr(v, n.s);
    else
        strcpy(n.s, "null");
    return n;
}
