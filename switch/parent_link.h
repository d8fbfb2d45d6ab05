/*
 * parent_link.h - a child switch's links to its parent (--parent), one per
 * job, made without stopping the event loop: the bootstrap handshake a rank
 * runs (base/bootstrap.h) as states polled beside the loop's other sockets,
 * as the listener's are (listener.h), each with a deadline.
 */
#ifndef INCMOE_SWITCH_PARENT_LINK_H
#define INCMOE_SWITCH_PARENT_LINK_H

#include <poll.h>

#include "settings.h"
#include "tx.h"

typedef enum {
    LINK_CONNECTING = 0, /* the TCP connect is under way */
    LINK_HANDSHAKE,      /* connected: the bootstrap exchange runs */
} parent_link_state_t;

typedef struct parent_link {
    struct parent_link *next;
    parent_link_state_t state;
    int fd;
    short events; /* what the state waits for */
    double deadline;
    int deadline_ms;
    uint64_t job;
    switch_parent_cb_t done;
    void *arg;
    inc_boot_t boot;
    double started;      /* when the link was asked for */
    double longest_step; /* the longest the loop spent on this link in one go, seconds */
} parent_link_t;

typedef struct {
    parent_link_t *head;
    int count;
    const switch_settings_t *set;
    const void *worker_addr; /* this switch's, sent to the parent */
    size_t worker_addr_len;
    /* The server's: the connection of a finished handshake (NULL: no endpoint). */
    conn_t *(*finish)(void *server, const inc_boot_t *boot, uint64_t job);
    void *server;
} parent_links_t;

/* Start a link for job; done runs once with its connection or the failure: from
   parent_links_service, or before this returns if it cannot start. */
void parent_link_start(parent_links_t *l, uint64_t job, switch_parent_cb_t done, void *arg);
/* The links' sockets into fds (room for max); their number. */
int parent_links_pollfds(const parent_links_t *l, struct pollfd *fds, int max);
/* The poll timeout: cap, or less if a deadline comes sooner. */
int parent_links_timeout_ms(const parent_links_t *l, int cap);
/* Move each link on (fds: what poll said of the first n); finished ones call done. */
void parent_links_service(parent_links_t *l, const struct pollfd *fds, int n);
/* The switch is stopping: every link fails. */
void parent_links_close(parent_links_t *l);

#endif
