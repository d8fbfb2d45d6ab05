/*
 * ucx_addr.h - the check every peer's UCX worker address passes before UCX sees it.
 *
 * ucp_ep_create() takes a packed worker address without its length and trusts
 * it: UCX 1.13.1 and 1.22.0 (src/ucp/wireup/address.c, ucp_address_unpack) read
 * as far as the bytes say, abort (ucs_assertv_always) on an address version
 * other than v1 or v2, use a memory-domain index of up to 255 and a device
 * count without bound as indexes of 64-entry arrays and 64-bit masks while
 * they choose lanes, and hand each transport its device and interface
 * addresses as pointers (NULL for a length of 0) that it reads its own
 * structure from.  inc_ucx_addr_check() walks the same layout with the length
 * in hand and refuses what a UCX of either version would read out of the
 * address, index out of range, abort on or turn into a NULL transport address.
 * The layout is the same in 1.13 and 1.22, so the same check serves both.
 *
 * What it does not judge: the transports' own bytes (a TCP address's flags,
 * IP and port, a shared-memory segment id).  A transport reads as far as its
 * own structure says, which for a malformed one can be up to
 * INC_UCX_ADDR_SLACK bytes past the end of the field, so a caller hands
 * ucp_ep_create() an address with at least that many bytes of its own memory
 * after it.  An address that passes may name an unreachable peer;
 * ucp_ep_create() or the first send then fails with a status.  A worker in
 * UCX_UNIFIED_MODE=y packs a shorter form that this check refuses.
 */
#ifndef INC_UCX_ADDR_H
#define INC_UCX_ADDR_H

#include <stddef.h>

#include "incmoe/incmoe.h"

/* How far past a field a transport of 1.13 or 1.22 reads: TCP's flags and family, then 16
   bytes (an IPv6 address, or the loopback form's host and namespace ids). */
#define INC_UCX_ADDR_SLACK 64

/*
 * Check the len bytes at addr, a peer's worker address, before they reach
 * ucp_ep_create() on the worker whose own address (ucp_worker_get_address) is
 * own/own_len.  INCMOE_OK: one whole packed worker address (the layout of
 * ucp_worker_get_address, non-unified) that UCX can unpack within its bytes,
 * and whose transports that this worker has too carry no empty device or
 * interface address where this worker's own are never empty.  INCMOE_ERR_PROTOCOL: the
 * peer's address is not, why (why_len > 0, or NULL) names the first thing
 * wrong and its offset.  INCMOE_ERR_INVALID_ARG: own itself fails the walk
 * (UCX_UNIFIED_MODE=y, or a UCX whose layout this check does not know).  own
 * NULL: the walk alone, no transport lengths.  Pure: no UCX call, no
 * allocation, safe on any bytes.
 */
incmoe_status_t inc_ucx_addr_check(const void *addr, size_t len, const void *own, size_t own_len,
                                   char *why, size_t why_len);

#endif
