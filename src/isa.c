/* isa.c - run-time dispatch: which compiled path of the hot loops runs.
 *
 * The hot loops are written once in portable C and compiled once per path
 * (TK_DISPATCH in internal.h); this file picks the path on first use from
 * what the CPU has and from TK_ISA, read once, and with it the vendor
 * tuning, from the CPU's vendor and TK_TUNE.  No ifunc: a resolver runs
 * before sanitizer runtimes are up, a first-use choice runs under TSan,
 * ASan and valgrind (which hides the CPU features it cannot emulate). */
#include "internal.h"

#include <stdlib.h>
#if TK__ISA_X86
#include <cpuid.h>
#endif

static const char *const tk__isa_names[TK__N_ISA] = {"portable", "avx2", "avx512"};

/* The best path this CPU (and its OS, for the AVX register state) runs. */
static int tk__isa_cpu(void)
{
#if TK__ISA_X86
    __builtin_cpu_init();
    /* F16C from cpuid: clang's __builtin_cpu_supports does not know it. */
    unsigned eax, ebx, ecx = 0, edx;
    bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c &&
                __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
                __builtin_cpu_supports("popcnt");
    bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                  __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#ifdef TK_EMULATED_AVX512
    avx512 = avx2;   /* tests/avx512/immintrin.h runs the path on AVX2 */
#endif
    return avx512 ? TK__ISA_AVX512 : avx2 ? TK__ISA_AVX2 : TK__ISA_PORTABLE;
#else
    return TK__ISA_PORTABLE;
#endif
}

/* -1 before the choice; then the path.  Every thread that races to make
 * the choice computes the same value, so hot calls read it relaxed; it is
 * stored with release after tk__isa_req (what TK_ISA asked at that moment,
 * for tk_build_info) and the tuning, which tk__isa_seen's readers need. */
_Atomic int tk__isa_level = -1;
static _Atomic int tk__isa_req = -1;
/* The vendor tuning (tk__tune), and what TK_TUNE asked, as for the path. */
static _Atomic int tk__tune_level = TK__TUNE_INTEL;
static _Atomic int tk__tune_req = -1;
static const char *const tk__tune_names[TK__N_TUNE] = {"intel", "amd"};

/* What the variable `var` asks for: the index of its value among the n
 * names, -1 unset or empty, -2 none of them. */
static int tk__asked(const char *var, const char *const *names, int n)
{
    const char *v = getenv(var);
    if (!v || !*v)
        return -1;
    for (int i = 0; i < n; i++)
        if (strcmp(v, names[i]) == 0)
            return i;
    return -2;
}

int tk__isa_init(void)
{
    int cpu = tk__isa_cpu(), asked = tk__asked("TK_ISA", tk__isa_names, TK__N_ISA);
    /* A forced path the CPU lacks would fault: the best one below it runs. */
    int isa = asked < 0 ? cpu : asked < cpu ? asked : cpu;
    atomic_store_explicit(&tk__isa_req, asked, memory_order_relaxed);
    int tune = tk__asked("TK_TUNE", tk__tune_names, TK__N_TUNE);
    atomic_store_explicit(&tk__tune_req, tune, memory_order_relaxed);
#if TK__ISA_X86
    if (tune < 0 && __builtin_cpu_is("amd"))
        tune = TK__TUNE_AMD;
#endif
    atomic_store_explicit(&tk__tune_level, tune < 0 ? TK__TUNE_INTEL : tune,
                          memory_order_relaxed);
    /* Release: a thread that reads the level by tk__isa_seen reads the
     * requests and the tuning stored above. */
    atomic_store_explicit(&tk__isa_level, isa, memory_order_release);
    return isa;
}

/* The path, chosen if need be, read so that what tk__isa_init stored with
 * it is seen too (tk__isa's own read is relaxed: it is on every hot call). */
static int tk__isa_seen(void)
{
    tk__isa();
    return atomic_load_explicit(&tk__isa_level, memory_order_acquire);
}

/* The vendor tuning: which of two equally exact ways some loops take,
 * picked by the CPU's vendor or TK_TUNE, never by the path (TK_ISA leaves
 * it alone). */
int tk__tune(void)
{
    tk__isa_seen();   /* the tuning is chosen with the path, on first use */
    return atomic_load_explicit(&tk__tune_level, memory_order_relaxed);
}

/* A variable's request as the build line gives it (tk__asked's values). */
static const char *tk__asked_name(int asked, const char *const *names)
{
    return asked == -1 ? "unset" : asked == -2 ? "unknown" : names[asked];
}

const char *tk_build_info(void)
{
    /* Every value is one of a few constants, so the line is assembled into
     * a buffer once; a second caller waits for the first to finish it. */
    static char line[256];
    static atomic_int state;   /* 0 empty, 1 being written, 2 ready */
    int expect = 0;
    if (atomic_load_explicit(&state, memory_order_acquire) == 2)
        return line;
    if (!atomic_compare_exchange_strong_explicit(&state, &expect, 1, memory_order_acquire,
                                                 memory_order_acquire)) {
        while (atomic_load_explicit(&state, memory_order_acquire) != 2)
            ;
        return line;
    }
    int isa = tk__isa_seen(), asked = atomic_load_explicit(&tk__isa_req, memory_order_relaxed);
    int tune_asked = atomic_load_explicit(&tk__tune_req, memory_order_relaxed);
#if defined(__clang__)
    const char *cc = "clang-" TK__STR(__clang_major__) "." TK__STR(__clang_minor__);
#elif defined(__GNUC__)
    const char *cc = "gcc-" TK__STR(__GNUC__) "." TK__STR(__GNUC_MINOR__);
#else
    const char *cc = "unknown";
#endif
    snprintf(line, sizeof line,
             "version=%s isa=%s cpu=%s TK_ISA=%s compiler=%s tune=%s TK_TUNE=%s",
             tk_version_string(), tk__isa_names[isa], tk__isa_names[tk__isa_cpu()],
             tk__asked_name(asked, tk__isa_names), cc, tk__tune_names[tk__tune()],
             tk__asked_name(tune_asked, tk__tune_names));
    atomic_store_explicit(&state, 2, memory_order_release);
    return line;
}
