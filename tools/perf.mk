# incmoe-perf, the emulated testbed and the OpenMPI reference.
# Included by tools/Makefile.am.

bin_PROGRAMS += incmoe-perf
incmoe_perf_SOURCES = perf.c
# Embedded runs start incmoe-switchd found by inc_switchd_find() (INCMOE_SWITCHD, beside
# the program, or the build tree relative to it).
incmoe_perf_CPPFLAGS = -I$(top_srcdir)/plugin
incmoe_perf_LDADD = libincmoe_tools.la $(top_builddir)/plugin/libincmoe.la

# tools/testbed up|run|down, the OpenMPI run on it, and the eqbw plot.
dist_bin_SCRIPTS += testbed mpi-reference plot-eqbw

# The independent ring reference is an MPI program: built with mpicc when
# configure found it, left in the build tree (tools/mpi-reference finds it there).
EXTRA_DIST += mpi_agrs.c
if HAVE_MPI
noinst_DATA = mpi_agrs
mpi_agrs: $(srcdir)/mpi_agrs.c
	$(AM_V_CC)$(MPICC) $(AM_CFLAGS) $(CFLAGS) -o $@ $(srcdir)/mpi_agrs.c
CLEANFILES += mpi_agrs
endif
