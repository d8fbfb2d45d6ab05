# fuzz.mk - builds and runs the libFuzzer targets (GNU make).  The top-level
# `make fuzz` runs it in $(top_builddir)/fuzz-build, separately from the gcc
# build: every product source below is compiled again with clang, coverage
# instrumentation and ASan + UBSan, into an archive each harness links.
#
# Adding a target NAME: write fuzz/fuzz_NAME.c (LLVMFuzzerTestOneInput), put
# its seeds in fuzz/corpus/NAME/, and add NAME to FUZZ_TARGETS.  The linker
# takes from the archive only what the harness reaches; ucx_fake.c stands in
# for UCX in every target.  A target that needs another library adds it to
# FUZZ_LIBS.

FUZZ_TARGETS = switch_msg switch_child client_msg bootstrap ucx_addr

FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_LIBS = -lcrypto -lpthread -lm

SAN = -fsanitize=address,undefined -fno-sanitize-recover=all
CFLAGS = -g -O1 -std=gnu11 -fno-omit-frame-pointer $(SAN) -fsanitize=fuzzer-no-link
CPPFLAGS = -I$(top_srcdir) -I$(top_srcdir)/include -I$(top_builddir)/include/incmoe $(UCX_CFLAGS)

# The product: the base library, the client, the switch but for its UCX service and main().
PRODUCT_SRCS = $(wildcard $(top_srcdir)/base/*.c) $(wildcard $(top_srcdir)/plugin/*.c) \
	$(filter-out %/server.c %/switchd.c,$(wildcard $(top_srcdir)/switch/*.c))
PRODUCT_OBJS = $(patsubst $(top_srcdir)/%.c,obj/%.o,$(PRODUCT_SRCS))

all: $(addprefix fuzz_,$(FUZZ_TARGETS))

obj/%.o: $(top_srcdir)/%.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

libproduct.a: $(PRODUCT_OBJS)
	rm -f $@
	ar rcs $@ $^

fuzz_%: obj/fuzz/fuzz_%.o obj/fuzz/ucx_fake.o libproduct.a
	$(FUZZ_CC) $(CFLAGS) -fsanitize=fuzzer $^ $(FUZZ_LIBS) -o $@

# Each target runs FUZZ_SECONDS from a scratch copy of its corpus (the tree's
# stays as committed); a crash leaves its input in artifacts/NAME/ and fails.
run: $(addprefix run-,$(FUZZ_TARGETS))

run-%: fuzz_%
	@rm -rf work/$* && mkdir -p work/$* artifacts/$*
	@cp $(top_srcdir)/fuzz/corpus/$*/* work/$*/
	@echo "fuzz: $* for $(FUZZ_SECONDS) s"
	@if ./fuzz_$* -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	    -print_final_stats=1 -artifact_prefix=artifacts/$*/ work/$* >$*.log 2>&1; then \
	    sed -n 's/^stat::number_of_executed_units: */fuzz: $*: executions: /p' $*.log; \
	    echo "fuzz: $*: no crash"; \
	else \
	    tail -60 $*.log; \
	    echo "fuzz: $* FAILED (log $(CURDIR)/$*.log, input in $(CURDIR)/artifacts/$*/)"; \
	    exit 1; \
	fi

.PHONY: all run
.SECONDARY:

-include $(PRODUCT_OBJS:.o=.d) $(wildcard obj/fuzz/*.d)
