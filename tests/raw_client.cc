/* raw_client.cc - see raw_client.h. */
#include "raw_client.h"

#include <cstring>
#include <utility>

#include "base/clock.h"

RawClient::~RawClient()
{
    if (ep_ != nullptr)
        inc_ucx_ep_close(&node_, ep_, 1, 1000);
    if (peer_ep_ != nullptr)
        inc_ucx_ep_close(&node_, peer_ep_, 1, 1000);
    if (addr_ != nullptr)
        ucp_worker_release_address(node_.worker, addr_);
    inc_ucx_node_close(&node_);
    for (auto *s : keep_)
        delete s;
}

ucs_status_t RawClient::on_am(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param)
{
    auto *self = static_cast<RawClient *>(arg);
    RawMsg m = {};
    memcpy(&m.hdr, header, header_length < sizeof(m.hdr) ? header_length : sizeof(m.hdr));
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV))
        m.payload.assign(static_cast<const char *>(data), length);
    self->received.push_back(m);
    return UCS_OK;
}

bool RawClient::connect(const std::string &addr, const std::string &key)
{
    if (inc_ucx_node_open(&node_, nullptr) != INCMOE_OK)
        return false;
    ucp_am_handler_param_t hp = {};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = INCMOE_AM_ID;
    hp.cb = on_am;
    hp.arg = this;
    ucp_worker_set_am_recv_handler(node_.worker, &hp);
    struct sockaddr_storage ss;
    socklen_t len;
    if (inc_ucx_parse_hostport(addr.c_str(), &ss, &len, 0) != INCMOE_OK ||
        ucp_worker_get_address(node_.worker, &addr_, &addr_len_) != UCS_OK)
        return false;
    /* The bootstrap as libincmoe runs it: the switch answers UCX only after it. */
    auto *boot = new inc_boot_t;
    bool ok = inc_boot_init(boot, INC_BOOT_CLIENT, key.data(), key.size(), addr_, addr_len_) ==
                  INCMOE_IN_PROGRESS &&
              inc_boot_run_client(boot, (struct sockaddr *)&ss, len, 5000) == INCMOE_OK;
    if (ok) {
        memcpy(token_, boot->token, sizeof(token_));
        ucp_ep_params_t ep = {};
        ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
        ep.address = (const ucp_address_t *)boot->peer_addr;
        ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
        ok = ucp_ep_create(node_.worker, &ep, &ep_) == UCS_OK;
    }
    delete boot;
    return ok;
}

void RawClient::send(const void *hdr, size_t header_len, const void *payload, size_t len, bool rndv)
{
    auto *h = new std::string(static_cast<const char *>(hdr), header_len);
    auto *p = new std::string(payload ? static_cast<const char *>(payload) : "", payload ? len : 0);
    keep_.push_back(h);
    keep_.push_back(p);
    ucp_request_param_t param = {};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_AM_SEND_FLAG_REPLY | (rndv ? UCP_AM_SEND_FLAG_RNDV : 0);
    ucs_status_ptr_t req =
        ucp_am_send_nbx(ep_, INCMOE_AM_ID, h->data(), h->size(), p->data(), p->size(), &param);
    inc_ucx_request_wait(&node_, req, 2000);
}

void RawClient::join(uint64_t job, uint32_t rank, uint32_t nranks, const uint8_t *token,
                     bool with_addr, const std::string *addr)
{
    inc_wire_hdr h;
    inc_wire_hdr_init(&h, WIRE_MSG_JOIN, job);
    h.rank = rank;
    inc_wire_join j = {};
    j.nranks = nranks;
    std::string a = addr != nullptr ? *addr
                    : with_addr     ? std::string((const char *)addr_, addr_len_)
                                    : std::string();
    j.addr_len = (uint32_t)a.size();
    j.timeout_ms = 10000;
    memcpy(j.token, token != nullptr ? token : token_, sizeof(j.token));
    std::string payload((const char *)&j, sizeof(j));
    payload += a;
    h.length = payload.size();
    send(h, payload.data(), payload.size());
}

bool RawClient::send_to_worker(const std::string &worker_addr, const inc_wire_hdr &hdr,
                               const void *payload, size_t len)
{
    ucp_ep_params_t ep = {};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address = (const ucp_address_t *)worker_addr.data();
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    if (peer_ep_ == nullptr && ucp_ep_create(node_.worker, &ep, &peer_ep_) != UCS_OK)
        return false;
    std::swap(ep_, peer_ep_);
    send(&hdr, sizeof(hdr), payload, len);
    std::swap(ep_, peer_ep_);
    return true;
}

void RawClient::progress(int ms)
{
    double end = inc_now_s() + ms / 1000.0;
    while (inc_now_s() < end)
        inc_ucx_node_wait(&node_, -1, 10);
}

bool RawClient::wait_for(unsigned msg, RawMsg *out, int timeout_ms)
{
    double end = inc_now_s() + timeout_ms / 1000.0;
    for (;;) {
        for (auto &m : received) {
            if (m.hdr.msg == msg) {
                if (out)
                    *out = m;
                return true;
            }
        }
        if (inc_now_s() > end)
            return false;
        inc_ucx_node_wait(&node_, -1, 10);
    }
}
