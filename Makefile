# libtilekern - GNU make, no configure step.  See README.md.

CC      ?= cc
CXX     ?= c++
PYTHON  ?= python3
PREFIX  ?= /usr/local
DESTDIR ?=
libdir     ?= $(PREFIX)/lib
includedir ?= $(PREFIX)/include
mandir     ?= $(PREFIX)/share/man

# Output folders: sanitizer and clang builds reuse the rules with other ones.
B ?= build
L ?= lib

HDR := include/tilekern.h
VMAJOR := $(shell sed -n 's/^\#define TK_VERSION_MAJOR \([0-9]*\)$$/\1/p' $(HDR))
VMINOR := $(shell sed -n 's/^\#define TK_VERSION_MINOR \([0-9]*\)$$/\1/p' $(HDR))
VPATCH := $(shell sed -n 's/^\#define TK_VERSION_PATCH \([0-9]*\)$$/\1/p' $(HDR))
VERSION := $(VMAJOR).$(VMINOR).$(VPATCH)

SONAME := libtilekern.so.$(VMAJOR)
SOFILE := $(L)/libtilekern.so.$(VERSION)
ALIB   := $(L)/libtilekern.a
PCFILE := $(L)/libtilekern.pc

WARN    := -Wall -Wextra -Wpedantic -Werror
# No FMA contraction anywhere: the numeric contract is separately rounded ops.
NUMERIC := -ffp-contract=off
CFLAGS  ?= -O3 -g
ALL_CFLAGS = -std=c11 $(WARN) $(NUMERIC) -D_POSIX_C_SOURCE=200809L -Iinclude $(SANFLAGS) $(CFLAGS)
LIB_CFLAGS = $(ALL_CFLAGS) -fPIC -fvisibility=hidden
LDLIBS := -lm
# lld versions every export without adding the node name itself as an
# absolute symbol (GNU ld and gold do), so exports are exactly the tk_* names.
LINKER := $(shell command -v ld.lld >/dev/null 2>&1 && echo -fuse-ld=lld)
TEST_LIBS := -lpthread

SRC  := $(sort $(wildcard src/*.c))
OBJ  := $(SRC:src/%.c=$(B)/obj/%.o)
TESTS := $(patsubst tests/%.c,$(B)/tests/%,$(sort $(wildcard tests/test_*.c)))
EXAMPLES := $(patsubst examples/%.c,$(B)/examples/%,$(sort $(wildcard examples/*.c)))
BENCHES := $(patsubst bench/%.c,$(B)/bench/%,$(sort $(filter-out bench/candidate.c bench/native.c,$(wildcard bench/*.c))))
MAN3 := $(sort $(wildcard man/man3/*.3))
MAN7 := $(sort $(wildcard man/man7/*.7))

# Link test and example programs against the shared library in $(L).
RPATH = -Wl,-rpath,$(abspath $(L))
CRITERION_LIBS = $(shell pkg-config --libs criterion 2>/dev/null || echo -lcriterion)

.PHONY: all examples check run bench install uninstall clean lint-man abi-check \
        abi-baseline sanitize deps tests clang-build python crosscheck tsan valgrind fuzz \
        avx512-emulated
.SUFFIXES:
.DELETE_ON_ERROR:

all: $(SOFILE) $(L)/$(SONAME) $(L)/libtilekern.so $(ALIB) $(PCFILE)

$(B)/obj/%.o: src/%.c src/internal.h $(HDR) | $(B)/obj
	$(CC) $(LIB_CFLAGS) -c $< -o $@
# The reduction oracle's products are exact in float64: fusing changes no bit.
$(B)/obj/oracle.o: NUMERIC := -ffp-contract=fast

$(SOFILE): $(OBJ) src/libtilekern.map | $(L)
	$(CC) $(LIB_CFLAGS) $(LINKER) -shared -Wl,-soname,$(SONAME) \
	    -Wl,--version-script=src/libtilekern.map -Wl,--no-undefined \
	    -o $@ $(OBJ) $(LDLIBS)

$(L)/$(SONAME): $(SOFILE)
	ln -sf $(notdir $(SOFILE)) $@
$(L)/libtilekern.so: $(L)/$(SONAME)
	ln -sf $(SONAME) $@

$(ALIB): $(OBJ) | $(L)
	rm -f $@
	$(AR) rcs $@ $(OBJ)

$(PCFILE): src/libtilekern.pc.in $(HDR) | $(L)
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(libdir)|g' \
	    -e 's|@INCLUDEDIR@|$(includedir)|g' -e 's|@VERSION@|$(VERSION)|g' $< >$@

$(B)/obj $(B)/tests $(B)/examples $(B)/bench $(L):
	mkdir -p $@

# --- programs --------------------------------------------------------------

$(B)/tests/%: tests/%.c tests/tk_test.h $(HDR) $(L)/libtilekern.so | $(B)/tests
	$(CC) $(ALL_CFLAGS) -Itests -o $@ $< -L$(L) -ltilekern $(RPATH) $(CRITERION_LIBS) $(TEST_LIBS) $(LDLIBS)

$(B)/examples/%: examples/%.c $(HDR) $(L)/libtilekern.so | $(B)/examples
	$(CC) $(ALL_CFLAGS) -o $@ $< -L$(L) -ltilekern $(RPATH) $(LDLIBS)

# Benchmarks link the static library (built portable; it dispatches) and
# are built, like the baselines they compare against, with -O3 for the
# machine running the bench, so that a loop written in a bench's own file
# is as strong as one in native.c; never installed.
$(B)/bench/%: bench/%.c bench/bench.h $(B)/bench/native.o $(HDR) $(ALIB) | $(B)/bench
	$(CC) $(ALL_CFLAGS) -O3 -march=native -Ibench -o $@ $< $(B)/bench/native.o $(ALIB) $(LDLIBS)

# The baselines a user would write, built for the machine running the bench.
$(B)/bench/native.o: bench/native.c bench/bench.h $(HDR) | $(B)/bench
	$(CC) $(ALL_CFLAGS) -O3 -march=native -Ibench -c -o $@ $<

examples: $(EXAMPLES)
tests: $(TESTS) $(EXAMPLES)

# --- the two README commands -------------------------------------------------

run: examples
	$(B)/examples/audit

check: deps
	@$(MAKE) --no-print-directory -j2 tests
	@tools/check "$(B)" "$(L)" "$(TESTS)"

deps:
	@tools/deps

# --- quality gates ------------------------------------------------------------

lint-man:
	mandoc -T lint -W warning $(MAN3) $(MAN7)
	@tools/man-check $(L)/$(SONAME)

abi-check: all
	@tools/abi-check $(L)/$(SONAME)

abi-baseline: all
	abidw --no-corpus-path --headers-dir include --out-file tests/abi/libtilekern.abi $(L)/$(SONAME)

sanitize:
	@$(MAKE) --no-print-directory B=build/san L=build/san/lib \
	    SANFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
	    CFLAGS="-O1 -g" tests
	@ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	    tools/check build/san build/san/lib "$(patsubst $(B)/%,build/san/%,$(TESTS))" --tests-only

# The AVX-512 path's C suites on a CPU without AVX-512, its intrinsics
# emulated by SIMDe (tools/avx512-emulated).
avx512-emulated:
	@tools/avx512-emulated $(B)

clang-build:
	@$(MAKE) --no-print-directory -j2 CC=clang B=build/clang L=build/clang/lib all

# The main job, the worked calls and a fast subset of the suites under
# valgrind: no error, nothing definitely or indirectly lost.  test_alloc
# keeps its own malloc (valgrind's would bypass it), so that the failure
# paths it forces run under memcheck too.  The runs are independent and go
# two at a time (the CI machine's two cores), the longest first.
VALGRIND = valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect \
    --error-exitcode=1 --trace-children=yes
VALGRIND_RUNS := $(addprefix valgrind-,test_alloc test_call test_core test_compare audit call)
valgrind: tests
	@mkdir -p $(B)/valgrind
	@$(MAKE) --no-print-directory -j2 $(VALGRIND_RUNS)
valgrind-audit:
	cd $(B)/valgrind && $(VALGRIND) $(abspath $(B))/examples/audit $(abspath tests/fixtures) >audit.log
valgrind-call:
	$(VALGRIND) $(B)/examples/call >$(B)/valgrind/call.log
valgrind-test_alloc:
	$(VALGRIND) --soname-synonyms=somalloc=nouserintercepts $(B)/tests/test_alloc --jobs 1
valgrind-test_%:
	$(VALGRIND) $(B)/tests/test_$* --jobs 1

# libFuzzer harnesses (clang), each run FUZZ_SECONDS after replaying the
# kept crashers in tests/fuzz/regressions, two at a time; the .npy corpus
# starts from the fixtures.
FUZZ_SECONDS ?= 60
FUZZ_SAN := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
FUZZERS := $(patsubst tests/fuzz/%.c,build/fuzz/bin/%,$(sort $(wildcard tests/fuzz/*.c)))
build/fuzz/bin/%: tests/fuzz/%.c tests/fuzz/fuzz.h $(HDR)
	@mkdir -p build/fuzz/bin
	clang $(ALL_CFLAGS) -fsanitize=fuzzer,address,undefined -O1 -g -o $@ $< \
	    build/fuzz/lib/libtilekern.a $(LDLIBS)
fuzz:
	@$(MAKE) --no-print-directory -j2 CC=clang B=build/fuzz L=build/fuzz/lib \
	    SANFLAGS="$(FUZZ_SAN)" CFLAGS="-O1 -g" build/fuzz/lib/libtilekern.a
	@$(MAKE) --no-print-directory -j2 $(FUZZERS)
	@$(MAKE) --no-print-directory -j2 $(patsubst build/fuzz/bin/%,fuzz-%,$(FUZZERS))
fuzz-%: build/fuzz/bin/%
	@f=$<; name=$*; mkdir -p build/fuzz/corpus-$$name; \
	[ $$name = npy ] && cp tests/fixtures/*.npy build/fuzz/corpus-$$name/; \
	for r in tests/fuzz/regressions/$$name-*; do [ -f "$$r" ] || continue; \
	    $$f "$$r" >/dev/null 2>&1 || { echo "fuzz: $$r crashes $$name again"; exit 1; }; done; \
	echo "fuzz: $$name for $(FUZZ_SECONDS) s"; \
	$$f -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=build/fuzz/$$name- \
	    build/fuzz/corpus-$$name >build/fuzz/$$name.log 2>&1 || \
	    { tail -40 build/fuzz/$$name.log; echo "fuzz: $$name found a crash (above)"; exit 1; }; \
	echo "fuzz: $$name: $$(grep -E "^Done" build/fuzz/$$name.log | tail -1)"

# Eight threads on shared and own handles under ThreadSanitizer: no reports.
tsan:
	@$(MAKE) --no-print-directory -j2 B=build/tsan L=build/tsan/lib SANFLAGS=-fsanitize=thread \
	    CFLAGS="-O1 -g" build/tsan/lib/libtilekern.a
	$(CC) $(ALL_CFLAGS) -fsanitize=thread -O1 -g -o build/tsan/threads tests/tsan/threads.c \
	    build/tsan/lib/libtilekern.a -lpthread $(LDLIBS)
	@mkdir -p build/tsan/out
	TSAN_OPTIONS="halt_on_error=1 exitcode=66" build/tsan/threads build/tsan/out

# The Python layer's cost: its C candidate as a shared object for ctypes.
$(B)/bench/libcandidate.so: bench/candidate.c $(HDR) $(L)/libtilekern.so | $(B)/bench
	$(CC) $(ALL_CFLAGS) -fPIC -shared -o $@ $< -L$(L) -ltilekern $(RPATH) $(LDLIBS)

bench: $(BENCHES) $(B)/bench/libcandidate.so
	@fail=0; for b in $(BENCHES); do $$b || fail=1; done; \
	    py=$$(tools/venv $(B)) && $$py bench/bench_python.py $(B)/bench/libcandidate.so || fail=1; \
	    [ $$fail -eq 0 ] || { echo "bench: a ratio is over its limit (see above)"; exit 1; }

# The Python package installed into $(B)/venv with its test dependencies.
python:
	@tools/venv $(B)

# Pallas (TPU interpret mode, on the CPU) against the library, bit for bit.
crosscheck:
	@tools/crosscheck $(B)


# --- install -------------------------------------------------------------------

install: all
	install -d $(DESTDIR)$(libdir)/pkgconfig $(DESTDIR)$(includedir) \
	    $(DESTDIR)$(mandir)/man3 $(DESTDIR)$(mandir)/man7
	install -m 644 $(HDR) $(DESTDIR)$(includedir)/tilekern.h
	install -m 755 $(SOFILE) $(DESTDIR)$(libdir)/
	ln -sf $(notdir $(SOFILE)) $(DESTDIR)$(libdir)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(libdir)/libtilekern.so
	install -m 644 $(ALIB) $(DESTDIR)$(libdir)/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(libdir)|g' \
	    -e 's|@INCLUDEDIR@|$(includedir)|g' -e 's|@VERSION@|$(VERSION)|g' \
	    src/libtilekern.pc.in >$(DESTDIR)$(libdir)/pkgconfig/tilekern.pc
	install -m 644 $(MAN3) $(DESTDIR)$(mandir)/man3/
	install -m 644 $(MAN7) $(DESTDIR)$(mandir)/man7/
	tools/man-links install $(DESTDIR)$(mandir)

uninstall:
	tools/man-links remove $(DESTDIR)$(mandir)
	rm -f $(DESTDIR)$(includedir)/tilekern.h \
	    $(DESTDIR)$(libdir)/libtilekern.so* $(DESTDIR)$(libdir)/libtilekern.a \
	    $(DESTDIR)$(libdir)/pkgconfig/tilekern.pc
	rm -f $(addprefix $(DESTDIR)$(mandir)/man3/,$(notdir $(MAN3))) \
	    $(addprefix $(DESTDIR)$(mandir)/man7/,$(notdir $(MAN7)))

clean:
	rm -rf build lib report python/build python/*.egg-info
