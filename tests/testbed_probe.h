/*
 * testbed_probe.h - what the suites that build namespace testbeds share: why
 * one cannot be built here, a testbed id no other testbed uses, and the
 * namespaces a testbed left.
 */
#ifndef INCMOE_TESTS_TESTBED_PROBE_H
#define INCMOE_TESTS_TESTBED_PROBE_H

#include <string>
#include <vector>

namespace testbed_probe
{
/* Why the testbed cannot run here, or "" when it can.  The probe works in a
   throw-away namespace, so it leaves nothing behind. */
std::string cannot_run_testbed();
/* A testbed id in first..first+9 that no testbed on this machine uses, or -1. */
int free_testbed_id(int first);
/* Namespaces whose name starts with prefix. */
std::vector<std::string> namespaces_with(const std::string &prefix);
bool exists(const std::string &path);
} // namespace testbed_probe

#endif
