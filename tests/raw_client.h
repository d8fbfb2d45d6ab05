/*
 * raw_client.h - a deliberately unruly switch client for the bad-input tests:
 * it speaks the wire protocol by hand, so it can send what libincmoe never would.
 */
#ifndef INCMOE_TEST_RAW_CLIENT_H
#define INCMOE_TEST_RAW_CLIENT_H

#include <string>
#include <vector>

extern "C" {
#include "base/bootstrap.h"
#include "base/ucx_util.h"
#include "base/wire.h"
}

struct RawMsg {
    inc_wire_hdr hdr;
    std::string payload;
};

class RawClient
{
  public:
    ~RawClient();
    /* Bootstrap with the switch (key: "" for none), then an endpoint to its worker. */
    bool connect(const std::string &addr, const std::string &key = "");
    /* Sends a header of header_len bytes (a short one is garbage on purpose). */
    void send(const void *hdr, size_t header_len, const void *payload, size_t len,
              bool rndv = false);
    void send(const inc_wire_hdr &hdr, const void *payload = nullptr, size_t len = 0)
    {
        send(&hdr, sizeof(hdr), payload, len);
    }
    /* JOIN as rank of an nranks job, with the bootstrap's session token (or another); with_addr:
       this client's real worker address for ring peers, else none; addr: these bytes instead. */
    void join(uint64_t job, uint32_t rank, uint32_t nranks, const uint8_t *token = nullptr,
              bool with_addr = false, const std::string *addr = nullptr);
    /* A message to another worker (a ring peer), by its address from JOIN_ACK. */
    bool send_to_worker(const std::string &worker_addr, const inc_wire_hdr &hdr,
                        const void *payload, size_t len);
    uint8_t token_[INC_BOOT_TOKEN] = {};
    /* Waits for a message of the given type; false on timeout. */
    bool wait_for(unsigned msg, RawMsg *out, int timeout_ms);
    void progress(int ms);

    std::vector<RawMsg> received;

  private:
    static ucs_status_t on_am(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param);
    inc_ucx_node_t node_ = {};
    ucp_ep_h ep_ = nullptr, peer_ep_ = nullptr;
    ucp_address_t *addr_ = nullptr;
    size_t addr_len_ = 0;
    std::vector<std::string *> keep_; /* payloads alive until the end */
};

#endif
