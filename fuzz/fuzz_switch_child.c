/*
 * fuzz_switch_child.c - fuzz_switch_msg.c's harness with the switch as a child in a tree
 * (--parent): the input speaks as its parent on the last connection once a job's first rank
 * joined.  See fuzz_switch_msg.c.
 */
#define FUZZ_SWITCH_CHILD 1
#include "fuzz_switch_msg.c"
