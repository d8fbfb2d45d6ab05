# Core suites: pure functions, the in-network collectives, and bad input.
check_PROGRAMS += test_reduce test_wire test_collectives test_errors

test_reduce_SOURCES = test_reduce.cc
test_reduce_LDADD = $(BASE_LIBS) $(TEST_LIBS)

test_wire_SOURCES = test_wire.cc
test_wire_LDADD = $(BASE_LIBS) $(TEST_LIBS)

test_collectives_SOURCES = test_collectives.cc
test_collectives_LDADD = libharness.la $(TEST_LIBS)

test_errors_SOURCES = test_errors.cc raw_client.cc raw_client.h
test_errors_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
test_errors_LDADD = libharness.la $(BASE_LIBS) $(TEST_LIBS) $(UCX_LIBS)
