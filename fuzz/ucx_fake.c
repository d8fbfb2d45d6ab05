/*
 * ucx_fake.c - see ucx_fake.h.  Requests complete in the order they were
 * posted within their kind (sends, receives), as on one UCX endpoint.  A
 * completion runs the request's callback, as UCX does from progress; the
 * request stays allocated until ucp_request_free, as UCX's does.
 */
#include "ucx_fake.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fake_req {
    struct fake_req *next;
    int is_recv;
    int done, freed;
    ucs_status_t status;
    ucp_send_nbx_callback_t send_cb;
    ucp_am_recv_data_nbx_callback_t recv_cb;
    void *user_data;
    /* receives */
    void *desc, *buf;
    size_t length;
} fake_req_t;

typedef struct {
    size_t length;
    unsigned char bytes[];
} fake_desc_t;

static struct {
    fake_req_t *head, **tail; /* pending, oldest first */
    fake_ucx_send_hook_t send_hook;
    fake_ucx_recv_hook_t recv_hook;
    int fail_sends;
    ucs_status_t fail_status;
    int recvs_posted;
    int unfreed;
} F = {.tail = &F.head};

static void unreachable(const char *fn)
{
    fprintf(stderr, "ucx_fake: %s is not on the path the fuzz harness drives\n", fn);
    abort();
}

void fake_ucx_set_hooks(fake_ucx_send_hook_t send, fake_ucx_recv_hook_t recv)
{
    F.send_hook = send;
    F.recv_hook = recv;
}

void *fake_ucx_desc_new(const void *payload, size_t length)
{
    fake_desc_t *d = malloc(sizeof(*d) + length);
    if (d == NULL)
        abort();
    d->length = length;
    memcpy(d->bytes, payload, length);
    return d;
}

void fake_ucx_desc_free(void *desc)
{
    free(desc);
}

void fake_ucx_fail_sends(int n, ucs_status_t status)
{
    F.fail_sends = n;
    F.fail_status = status;
}

int fake_ucx_take_recvs_posted(void)
{
    int n = F.recvs_posted;
    F.recvs_posted = 0;
    return n;
}

static fake_req_t *req_new(void)
{
    fake_req_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        abort();
    F.unfreed++;
    return r;
}

static void req_queue(fake_req_t *r)
{
    *F.tail = r;
    F.tail = &r->next;
}

static void req_complete(fake_req_t *r, ucs_status_t status)
{
    int freed_before = r->freed; /* else the callback's ucp_request_free releases it */
    r->done = 1;
    r->status = status;
    if (r->is_recv) {
        fake_desc_t *d = r->desc;
        if (status == UCS_OK)
            memcpy(r->buf, d->bytes, r->length);
        free(d);
        if (r->recv_cb != NULL)
            r->recv_cb(r, status, status == UCS_OK ? r->length : 0, r->user_data);
    } else if (r->send_cb != NULL) {
        r->send_cb(r, status, r->user_data);
    }
    if (freed_before) {
        F.unfreed--;
        free(r);
    }
}

/* Complete up to n pending requests of one kind (-1: any), oldest first. */
static int complete(int n, int kind, ucs_status_t status)
{
    int done = 0;
    fake_req_t **pp = &F.head;
    while (*pp != NULL && done < n) {
        fake_req_t *r = *pp;
        if (kind >= 0 && r->is_recv != kind) {
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        if (*pp == NULL)
            F.tail = pp;
        /* The callback may post more: they queue behind, and this walk resumes at pp. */
        req_complete(r, status);
        done++;
        if (*pp == NULL)
            F.tail = pp;
    }
    return done;
}

int fake_ucx_complete_sends(int n, ucs_status_t status)
{
    return complete(n, 0, status);
}

int fake_ucx_complete_recvs(int n, ucs_status_t status)
{
    return complete(n, 1, status);
}

int fake_ucx_pending(void)
{
    int n = 0;
    for (fake_req_t *r = F.head; r != NULL; r = r->next)
        n++;
    return n;
}

int fake_ucx_unfreed(void)
{
    return F.unfreed;
}

/* ------------------------------------------------------------------------ */
/* the message path                                                         */

ucs_status_ptr_t ucp_am_send_nbx(ucp_ep_h ep, unsigned id, const void *header, size_t header_length,
                                 const void *buffer, size_t count, const ucp_request_param_t *param)
{
    (void)id;
    if (F.send_hook != NULL)
        F.send_hook(ep, header, header_length, buffer, count, param);
    if (F.fail_sends > 0) {
        F.fail_sends--;
        return UCS_STATUS_PTR(F.fail_status);
    }
    fake_req_t *r = req_new();
    if (param->op_attr_mask & UCP_OP_ATTR_FIELD_CALLBACK)
        r->send_cb = param->cb.send;
    if (param->op_attr_mask & UCP_OP_ATTR_FIELD_USER_DATA)
        r->user_data = param->user_data;
    req_queue(r);
    return r;
}

ucs_status_ptr_t ucp_am_recv_data_nbx(ucp_worker_h worker, void *data_desc, void *buffer,
                                      size_t count, const ucp_request_param_t *param)
{
    (void)worker;
    fake_desc_t *d = data_desc;
    if (d == NULL || d->length != count) {
        fprintf(stderr, "ucx_fake: receive of %zu bytes from a descriptor of %zu\n", count,
                d != NULL ? d->length : 0);
        abort();
    }
    if (F.recv_hook != NULL)
        F.recv_hook(buffer, count,
                    (param->op_attr_mask & UCP_OP_ATTR_FIELD_MEMH) ? param->memh : NULL);
    fake_req_t *r = req_new();
    r->is_recv = 1;
    r->desc = d;
    r->buf = buffer;
    r->length = count;
    if (param->op_attr_mask & UCP_OP_ATTR_FIELD_CALLBACK)
        r->recv_cb = param->cb.recv_am;
    if (param->op_attr_mask & UCP_OP_ATTR_FIELD_USER_DATA)
        r->user_data = param->user_data;
    req_queue(r);
    F.recvs_posted++;
    return r;
}

void ucp_request_free(void *request)
{
    fake_req_t *r = request;
    if (r->freed) {
        fprintf(stderr, "ucx_fake: request %p freed twice\n", request);
        abort();
    }
    r->freed = 1;
    if (r->done) {
        F.unfreed--;
        free(r);
    }
}

ucs_status_t ucp_request_check_status(void *request)
{
    fake_req_t *r = request;
    return r->done ? r->status : UCS_INPROGRESS;
}

/* One completion per call, the oldest first, as a progress that found one event. */
unsigned ucp_worker_progress(ucp_worker_h worker)
{
    (void)worker;
    return (unsigned)complete(1, -1, UCS_OK);
}

/* "Events arrived": the caller progresses again instead of sleeping. */
ucs_status_t ucp_worker_arm(ucp_worker_h worker)
{
    (void)worker;
    return UCS_ERR_BUSY;
}

/* Destroying the worker purges what is pending, as UCX does. */
void ucp_worker_destroy(ucp_worker_h worker)
{
    (void)worker;
    complete(1 << 30, -1, UCS_ERR_CANCELED);
}

void ucp_cleanup(ucp_context_h context)
{
    (void)context;
}

ucs_status_ptr_t ucp_ep_flush_nbx(ucp_ep_h ep, const ucp_request_param_t *param)
{
    (void)ep;
    (void)param;
    return NULL;
}

ucs_status_ptr_t ucp_worker_flush_nbx(ucp_worker_h worker, const ucp_request_param_t *param)
{
    (void)worker;
    (void)param;
    return NULL;
}

ucs_status_ptr_t ucp_ep_close_nbx(ucp_ep_h ep, const ucp_request_param_t *param)
{
    (void)ep;
    (void)param;
    return NULL;
}

const char *ucs_status_string(ucs_status_t status)
{
    switch (status) {
    case UCS_OK:
        return "Success";
    case UCS_INPROGRESS:
        return "Operation in progress";
    case UCS_ERR_NO_MEMORY:
        return "Out of memory";
    case UCS_ERR_INVALID_PARAM:
        return "Invalid parameter";
    case UCS_ERR_CANCELED:
        return "Request canceled";
    case UCS_ERR_NOT_CONNECTED:
        return "Endpoint is not connected";
    case UCS_ERR_CONNECTION_RESET:
        return "Connection reset by remote peer";
    default:
        return "UCX error (ucx_fake)";
    }
}

/* ------------------------------------------------------------------------ */
/* setting a transport up: no harness gets here                             */

ucs_status_t ucp_config_read(const char *env_prefix, const char *filename, ucp_config_t **config_p)
{
    (void)env_prefix, (void)filename, (void)config_p;
    unreachable(__func__);
    return UCS_ERR_UNSUPPORTED;
}

void ucp_config_release(ucp_config_t *config)
{
    (void)config;
    unreachable(__func__);
}

ucs_status_t ucp_config_modify(ucp_config_t *config, const char *name, const char *value)
{
    (void)config, (void)name, (void)value;
    unreachable(__func__);
    return UCS_ERR_UNSUPPORTED;
}

ucs_status_t ucp_init_version(unsigned api_major_version, unsigned api_minor_version,
                              const ucp_params_t *params, const ucp_config_t *config,
                              ucp_context_h *context_p)
{
    (void)api_major_version, (void)api_minor_version, (void)params, (void)config, (void)context_p;
    unreachable(__func__);
    return UCS_ERR_UNSUPPORTED;
}

ucs_status_t ucp_worker_create(ucp_context_h context, const ucp_worker_params_t *params,
                               ucp_worker_h *worker_p)
{
    (void)context, (void)params, (void)worker_p;
    unreachable(__func__);
    return UCS_ERR_UNSUPPORTED;
}

ucs_status_t ucp_worker_get_efd(ucp_worker_h worker, int *fd)
{
    (void)worker, (void)fd;
    unreachable(__func__);
    return UCS_ERR_UNSUPPORTED;
}

ucs_status_t ucp_worker_set_am_recv_handler(ucp_worker_h worker,
                                            const ucp_am_handler_param_t *param)
{
    (void)worker, (void)param;
    unreachable(__func__);
    return UCS_ERR_UNSUPPORTED;
}

ucs_status_t ucp_ep_create(ucp_worker_h worker, const ucp_ep_params_t *params, ucp_ep_h *ep_p)
{
    (void)worker, (void)params, (void)ep_p;
    unreachable(__func__);
    return UCS_ERR_UNSUPPORTED;
}

ucs_status_t ucp_context_query(ucp_context_h context, ucp_context_attr_t *attr)
{
    (void)context, (void)attr;
    unreachable(__func__);
    return UCS_ERR_UNSUPPORTED;
}

ucs_status_t ucp_worker_get_address(ucp_worker_h worker, ucp_address_t **address_p,
                                    size_t *address_length_p)
{
    (void)worker, (void)address_p, (void)address_length_p;
    unreachable(__func__);
    return UCS_ERR_UNSUPPORTED;
}

void ucp_worker_release_address(ucp_worker_h worker, ucp_address_t *address)
{
    (void)worker, (void)address;
    unreachable(__func__);
}

ucs_status_t ucp_mem_map(ucp_context_h context, const ucp_mem_map_params_t *params,
                         ucp_mem_h *memh_p)
{
    (void)context, (void)params, (void)memh_p;
    unreachable(__func__);
    return UCS_ERR_UNSUPPORTED;
}

ucs_status_t ucp_mem_unmap(ucp_context_h context, ucp_mem_h memh)
{
    (void)context, (void)memh;
    unreachable(__func__);
    return UCS_ERR_UNSUPPORTED;
}

void ucp_am_data_release(ucp_worker_h worker, void *data)
{
    (void)worker, (void)data;
    unreachable(__func__);
}
