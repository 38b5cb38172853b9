/* print.c - the shortest round-trip number printer (Python's repr() of a
 * float) and the JSON string and number writers, shared by every report:
 * the audit's, tk_compare_format, the pipeline trace and the bench receipt. */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* d.ddd x 10^x as a long double, for p digits d. */
static long double tk__value(const char *d, int p, int x)
{
    char s[48];
    snprintf(s, sizeof s, "%c.%.*se%d", d[0], p - 1, d + 1, x);
    return strtold(s, NULL);
}

/* |v| to p significant digits, rounded to nearest (step 0) or one unit in
 * the last place up or down from that (step 1 or -1), into d with its
 * decimal exponent in x.  True when they read back to |v|. */
static bool tk__digits(double v, int p, int step, char *d, int *x)
{
    char e[40];
    snprintf(e, sizeof e, "%.*e", p - 1, fabs(v));
    int n = 0;
    const char *s = e;
    for (; *s != 'e'; s++)
        if (*s != '.')
            d[n++] = *s;
    *x = atoi(s + 1);
    int i = p - 1;
    if (step > 0) {
        while (i >= 0 && d[i] == '9')
            d[i--] = '0';
        if (i < 0) {  /* 99..9 + 1: 10..0, one place up */
            d[0] = '1';
            ++*x;
        } else {
            d[i]++;
        }
    } else if (step < 0) {
        while (i >= 0 && d[i] == '0')
            d[i--] = '9';
        if (i < 0)
            return false;
        if (--d[i] == '0' && i == 0) {  /* below 10..0: 99..9, one place down */
            memmove(d, d + 1, (size_t)p - 1);
            d[p - 1] = '9';
            --*x;
        }
    }
    char back[48];
    snprintf(back, sizeof back, "%c.%.*se%d", d[0], p - 1, d + 1, *x);
    return strtod(back, NULL) == fabs(v);
}

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
    /* The fewest significant digits that read back exactly: the nearest
     * p digits, or else the p digits one unit either side, which can read
     * back where the nearest do not (at a power of two the gap below is
     * half the gap above); of two that do, the nearer, as Python picks. */
    char digits[20];
    int nd = 0, x = 0;
    for (int p = 1; p <= 17 && !nd; p++) {  /* 17 digits always read back */
        if (tk__digits(v, p, 0, digits, &x)) {
            nd = p;
            continue;
        }
        char up[20], down[20];
        int xu, xd;
        bool u = tk__digits(v, p, 1, up, &xu), d = tk__digits(v, p, -1, down, &xd);
        if (u && d)   /* the nearer of the two */
            u = fabsl(tk__value(up, p, xu) - fabsl((long double)v)) <
                fabsl(tk__value(down, p, xd) - fabsl((long double)v));
        if (u || d) {
            memcpy(digits, u ? up : down, (size_t)p);
            x = u ? xu : xd;
            nd = p;
        }
    }
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    /* v = d.ddd x 10^x */
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
