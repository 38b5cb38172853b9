/* device.c - tk_device: the host CPU, simulated TPU profiles, external targets. */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TK__FIELDS 8   /* TK_DEVICE_ONCHIP_BYTES .. TK_DEVICE_LAYOUT_COLS */
#define TK__MIB (INT64_C(1) << 20)

/* Sources (tk_device(3) has the full citations): VMEM per TensorCore from
 * JAX's tpu_info table; default scoped VMEM limits from the Pallas TPU
 * docs; HBM bandwidth per chip from the Cloud TPU system-architecture pages
 * (v4: tpu_info); compute = TensorCores x 8 x 128 VPU lanes x clock, the
 * clock being bf16 peak / (TensorCores x MXUs x MXU MACs x 2).  Copy
 * latency and copy engines have no published figure: 500 ns and 4 engines
 * are modelling assumptions. */
static const struct {
    const char *name, *alias;   /* alias: another device_kind JAX reports */
    int64_t f[TK__FIELDS];
} tk__profiles[] = {
    {"TPU v5 lite", "TPU v5e",
     {128 * TK__MIB, 16 * TK__MIB, INT64_C(819000000000), 500, 4, INT64_C(1539062500000), 8, 128}},
    {"TPU v4", NULL,
     {16 * TK__MIB, 16 * TK__MIB, INT64_C(1230000000000), 500, 4, INT64_C(2148437500000), 8, 128}},
    {"TPU v5p", "TPU v5",
     {64 * TK__MIB, 16 * TK__MIB, INT64_C(2765000000000), 500, 4, INT64_C(3585937500000), 8, 128}},
    {"TPU v6e", "TPU v6 lite",
     {128 * TK__MIB, 32 * TK__MIB, INT64_C(1640000000000), 500, 4, INT64_C(1792968750000), 8, 128}},
};
#define TK__N_PROFILES ((int64_t)(sizeof tk__profiles / sizeof *tk__profiles))

struct tk_device {
    bool simulated;
    int64_t f[TK__FIELDS];
    bool known[TK__FIELDS];   /* false: no figure yet; get fails until set */
    char *platform, *kind;    /* point into the same allocation */
};

static const char *const tk__field_names[TK__FIELDS] = {
    "TK_DEVICE_ONCHIP_BYTES", "TK_DEVICE_ONCHIP_LIMIT_BYTES", "TK_DEVICE_HBM_BYTES_PER_S",
    "TK_DEVICE_COPY_LATENCY_NS", "TK_DEVICE_COPY_ENGINES", "TK_DEVICE_COMPUTE_ELEMS_PER_S",
    "TK_DEVICE_LAYOUT_ROWS", "TK_DEVICE_LAYOUT_COLS"};

static int tk__device_new(tk_device **out, const char *fn, bool simulated,
                          const char *platform, const char *kind)
{
    size_t np = strlen(platform) + 1, nk = strlen(kind) + 1;
    tk_device *d = malloc(sizeof *d + np + nk);
    if (!d)
        return tk__fail(TK_ENOMEM, "%s: out of memory for the handle", fn);
    memset(d, 0, sizeof *d);
    d->simulated = simulated;
    d->platform = memcpy((char *)(d + 1), platform, np);
    d->kind = memcpy(d->platform + np, kind, nk);
    *out = d;
    return TK_OK;
}

static void tk__device_profile(tk_device *d, int64_t p)
{
    for (int i = 0; i < TK__FIELDS; i++) {
        d->f[i] = tk__profiles[p].f[i];
        d->known[i] = true;
    }
}

static int64_t tk__profile_find(const char *name)
{
    for (int64_t p = 0; p < TK__N_PROFILES; p++)
        if (!strcmp(name, tk__profiles[p].name) ||
            (tk__profiles[p].alias && !strcmp(name, tk__profiles[p].alias)))
            return p;
    return -1;
}

bool tk__same_kind(const char *a, const char *b)
{
    int64_t p = tk__profile_find(a);
    return !strcmp(a, b) || (p >= 0 && p == tk__profile_find(b));
}

/* A system file that cannot be opened leaves its figure unknown, unless
 * memory ran out: that fails the call rather than describe the host less
 * than it could. */
static int tk__sys_open(FILE **f, const char *path)
{
    if ((*f = fopen(path, "r")) || errno != ENOMEM)
        return TK_OK;
    return tk__fail(TK_ENOMEM, "tk_device_host: out of memory to read %s", path);
}

/* The CPU's marketing name from /proc/cpuinfo, where there is one. */
static int tk__cpu_name(char *buf, size_t size)
{
    snprintf(buf, size, "host cpu");
    FILE *f;
    int rc = tk__sys_open(&f, "/proc/cpuinfo");
    if (!f)
        return rc;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) || !colon)
            continue;
        colon += 1 + strspn(colon + 1, " \t");
        colon[strcspn(colon, "\n")] = '\0';
        if (*colon)
            snprintf(buf, size, "%s", colon);
        break;
    }
    fclose(f);
    return TK_OK;
}

/* Size of the level-2 cache in bytes from sysfs ("1024K"), or 0. */
static int tk__l2_bytes(int64_t *bytes)
{
    *bytes = 0;
    for (int i = 0; i < 8; i++) {
        char path[96], text[32];
        int level = 0;
        long long size = 0;
        char unit = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f;
        int rc = tk__sys_open(&f, path);
        if (!f)
            return rc;
        bool ok = fscanf(f, "%d", &level) == 1;
        fclose(f);
        if (!ok || level != 2)
            continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        rc = tk__sys_open(&f, path);
        if (!f)
            return rc;
        ok = fgets(text, sizeof text, f) && sscanf(text, "%lld%c", &size, &unit) >= 1;
        fclose(f);
        if (ok && size > 0 && size <= INT64_C(1) << 40)
            *bytes = unit == 'K' ? size << 10 : unit == 'M' ? size << 20 : size;
        return TK_OK;
    }
    return TK_OK;
}

int tk_device_host(tk_device **out)
{
    if (!out)
        return tk__fail(TK_EINVAL, "tk_device_host: out is NULL");
    *out = NULL;
    char name[256];
    int64_t l2;
    tk_device *d;
    int rc = tk__cpu_name(name, sizeof name);
    if (rc || (rc = tk__l2_bytes(&l2)) ||
        (rc = tk__device_new(&d, "tk_device_host", false, "cpu", name)))
        return rc;
    /* The host executor takes any block, so its layout tile is 1x1; the L2
     * cache stands in for on-chip memory.  Other figures are unknown. */
    const int onchip[] = {TK_DEVICE_ONCHIP_BYTES, TK_DEVICE_ONCHIP_LIMIT_BYTES};
    for (int i = 0; i < 2 && l2 > 0; i++) {
        d->f[onchip[i] - TK_DEVICE_ONCHIP_BYTES] = l2;
        d->known[onchip[i] - TK_DEVICE_ONCHIP_BYTES] = true;
    }
    const int layout[] = {TK_DEVICE_LAYOUT_ROWS, TK_DEVICE_LAYOUT_COLS};
    for (int i = 0; i < 2; i++) {
        d->f[layout[i] - TK_DEVICE_ONCHIP_BYTES] = 1;
        d->known[layout[i] - TK_DEVICE_ONCHIP_BYTES] = true;
    }
    *out = d;
    return TK_OK;
}

int tk_device_simulated(tk_device **out, const char *profile)
{
    if (!out)
        return tk__fail(TK_EINVAL, "tk_device_simulated: out is NULL");
    *out = NULL;
    if (!profile)
        return tk__fail(TK_EINVAL, "tk_device_simulated: profile is NULL");
    int64_t p = tk__profile_find(profile);
    if (p < 0) {
        char known[256] = "";
        for (int64_t i = 0; i < TK__N_PROFILES; i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s\"%s\"",
                     i ? ", " : "", tk__profiles[i].name);
        return tk__fail(TK_EINVAL, "tk_device_simulated: unknown profile \"%s\"; known "
                        "profiles are %s", profile, known);
    }
    tk_device *d;
    int rc = tk__device_new(&d, "tk_device_simulated", true, "tpu", tk__profiles[p].name);
    if (rc)
        return rc;
    tk__device_profile(d, p);
    *out = d;
    return TK_OK;
}

int tk_device_external(tk_device **out, const char *platform, const char *device_kind)
{
    if (!out)
        return tk__fail(TK_EINVAL, "tk_device_external: out is NULL");
    *out = NULL;
    if (!platform || !*platform || !device_kind || !*device_kind)
        return tk__fail(TK_EINVAL, "tk_device_external: platform and device_kind must be "
                        "non-empty strings: got %s%s%s and %s%s%s",
                        platform ? "\"" : "", platform ? platform : "NULL",
                        platform ? "\"" : "", device_kind ? "\"" : "",
                        device_kind ? device_kind : "NULL", device_kind ? "\"" : "");
    tk_device *d;
    int rc = tk__device_new(&d, "tk_device_external", false, platform, device_kind);
    if (rc)
        return rc;
    /* A real TPU that matches a profile starts from its published figures. */
    int64_t p = strcmp(platform, "tpu") ? -1 : tk__profile_find(device_kind);
    if (p >= 0)
        tk__device_profile(d, p);
    *out = d;
    return TK_OK;
}

void tk_device_destroy(tk_device *d) { free(d); }

int tk_device_is_simulated(const tk_device *d) { return d ? d->simulated : -1; }
const char *tk_device_kind(const tk_device *d) { return d ? d->kind : NULL; }
const char *tk_device_platform(const tk_device *d) { return d ? d->platform : NULL; }

const char *tk_device_profile_name(int64_t index)
{
    return index >= 0 && index < TK__N_PROFILES ? tk__profiles[index].name : NULL;
}

static void tk__device_store(void *h, int param, int64_t value)
{
    tk_device *d = h;
    d->f[param - TK_DEVICE_ONCHIP_BYTES] = value;
    d->known[param - TK_DEVICE_ONCHIP_BYTES] = true;
}

int tk_device_set(tk_device *d, int param, int64_t value)
{
    static const tk__settable s = {"tk_device_set", "device", TK__DEVICE, NULL, NULL,
                                   tk__device_store, -1, NULL};
    return tk__param_set(&s, d, param, value);
}

bool tk__device_known(const tk_device *d, int param, int64_t *value)
{
    int i = param - TK_DEVICE_ONCHIP_BYTES;
    if (d->known[i])
        *value = d->f[i];
    return d->known[i];
}

int tk_device_get(const tk_device *d, int param, int64_t *value)
{
    if (!d || !value)
        return tk__fail(TK_EINVAL, "tk_device_get: %s is NULL", !d ? "device" : "value");
    if (param < TK_DEVICE_ONCHIP_BYTES || param >= TK_DEVICE_ONCHIP_BYTES + TK__FIELDS)
        return tk__fail(TK_EINVAL, "tk_device_get: unknown parameter %d", param);
    int i = param - TK_DEVICE_ONCHIP_BYTES;
    if (!d->known[i])
        return tk__fail(TK_ESTATE, "tk_device_get: %s of %s device \"%s\" is unknown until "
                        "set with tk_device_set", tk__field_names[i], d->platform, d->kind);
    *value = d->f[i];
    return TK_OK;
}
