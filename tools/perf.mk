# incmoe-perf, the emulated testbed and the OpenMPI reference.
# Included by tools/Makefile.am.

bin_PROGRAMS += incmoe-perf
# --extra-slots: the MoE layer's per-token replica rule (moe/replica_choice.c, internal to
# libincmoe_moe) compiled in, as tests/moe.mk takes it; the placement from libincmoe_moe.
incmoe_perf_SOURCES = perf.c perf.h perf_dc.c dc_columns.c dc_columns.h perf_replicas.c \
	../moe/replica_choice.c
# Embedded runs start incmoe-switchd found by inc_switchd_find() (INCMOE_SWITCHD, beside
# the program, or the build tree relative to it).
incmoe_perf_CPPFLAGS = $(INCMOE_CPPFLAGS) -I$(top_srcdir)/moe
incmoe_perf_LDADD = libincmoe_tools.la $(top_builddir)/moe/libincmoe_moe.la \
	$(top_builddir)/plugin/libincmoe.la

# tools/testbed up|run|down is installed as incmoe-testbed: bindir holds only
# incmoe and incmoe-* names.  The OpenMPI run on the testbed (it needs mpi_agrs
# from a build tree) and the eqbw plot are source-tree tools, shipped only.
bin_SCRIPTS += incmoe-testbed
CLEANFILES += incmoe-testbed
EXTRA_DIST += testbed mpi-reference plot-eqbw
incmoe-testbed: $(srcdir)/testbed
	$(AM_V_GEN)cp $(srcdir)/testbed $@ && chmod +x $@

# The independent references are MPI programs: mpi_agrs (the ring's AllGather ||
# ReduceScatter) and mpi_dc (dispatch || combine as two MPI_Ialltoallv, with route.c's
# routing), built with mpicc when configure found it, left in the build tree
# (tools/mpi-reference finds them there).  Never with the sanitizers: it is OpenMPI's code
# under test there, and OpenMPI's own allocations outlive MPI_Finalize.
EXTRA_DIST += mpi_agrs.c mpi_dc.c
if HAVE_MPI
noinst_DATA = mpi_agrs mpi_dc
mpi_agrs: $(srcdir)/mpi_agrs.c
	$(AM_V_CC)$(MPICC) $(filter-out $(SAN_FLAGS),$(AM_CFLAGS)) $(CFLAGS) -o $@ $(srcdir)/mpi_agrs.c
mpi_dc: $(srcdir)/mpi_dc.c $(srcdir)/route.c $(srcdir)/route.h $(srcdir)/dc_columns.c \
		$(srcdir)/dc_columns.h
	$(AM_V_CC)$(MPICC) $(filter-out $(SAN_FLAGS),$(AM_CFLAGS)) $(CFLAGS) -I$(top_srcdir)/include \
		-I$(top_builddir)/include/incmoe -o $@ $(srcdir)/mpi_dc.c $(srcdir)/route.c \
		$(srcdir)/dc_columns.c -lm
CLEANFILES += mpi_agrs mpi_dc
endif
