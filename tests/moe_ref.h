/*
 * moe_ref.h - MoE test problems and an independent fp64 reference of
 * Equation (1): y_t = sum over e in K(t) of g_t,e W_down,e (SiLU(W_gate,e x_t) * W_up,e x_t).
 */
#ifndef INCMOE_TEST_MOE_REF_H
#define INCMOE_TEST_MOE_REF_H

#include <stdint.h>

#include <functional>
#include <string>
#include <vector>

#include "incmoe/incmoe.h"
#include "incmoe/incmoe_moe.h"

namespace moeref
{

struct Shape {
    int E = 8, k = 2, H = 16, I = 8, N = 1;
    incmoe_dtype_t dtype = INCMOE_FLOAT32;
};

/* Every rank's tokens and every expert's weights, stored already rounded to
   the datatype (as the layer sees them) and also as doubles for the reference. */
struct Problem {
    Shape s;
    std::vector<int> counts;
    std::vector<std::vector<uint8_t>> x;   /* per rank, [T_r][H] in dtype */
    std::vector<std::vector<int32_t>> ids; /* per rank, [T_r][k] */
    std::vector<std::vector<float>> w;     /* per rank, [T_r][k] */
    std::vector<uint8_t> wg, wu, wd;       /* all experts, dtype */
};

/* all_remote_every: every n-th token of each rank picks only experts hosted by
   other ranks (0 = never).  Placement is contiguous, E/N per rank. */
Problem make_problem(const Shape &s, const std::vector<int> &counts, uint64_t seed,
                     int all_remote_every = 3);

/* The local experts' weights of rank r (contiguous placement). */
void local_weights(const Problem &p, int rank, std::vector<uint8_t> *g, std::vector<uint8_t> *u,
                   std::vector<uint8_t> *d);

/* fp64 reference outputs of rank r's tokens, [T_r][H]; with mag, also the
   first-order size of the rounding errors per element: Equation (1) evaluated
   on absolute values (|g| |W_down| (|SiLU(gate)| |W_up||x| + 1.1 |W_gate||x| |up|)),
   since sums inside and across the FFNs may cancel while their errors do not. */
std::vector<double> reference(const Problem &p, int rank, std::vector<double> *mag = nullptr);

double to_double(const void *base, size_t i, incmoe_dtype_t dtype);

/* Error bound per token: ||out - ref||_2 <= rel_bound * ||mag||_2. */
double rel_bound(incmoe_dtype_t dtype);

/* "" if every token of out matches ref within rel_bound, else a description. */
std::string check_against_ref(const void *out, const std::vector<double> &ref,
                              const std::vector<double> &mag, int T, int H, incmoe_dtype_t dtype,
                              const char *what);

/* "" if every token's cosine similarity between a and b is >= min_cos. */
std::string check_cosine(const void *a, const void *b, int T, int H, incmoe_dtype_t dtype,
                         double min_cos, const char *what);

/* Creates a communicator for rank r of n on the switch at addr. */
incmoe_comm_t *comm_create(const std::string &addr, unsigned long long job, int rank, int n,
                           incmoe_algo_t algo, std::string *err);

/* The layer's parameters for shape s on comm with rank's local weights g, u, d: room for
   max_tokens tokens, a 20 s bound, the rest incmoe_moe_params_init's. */
incmoe_moe_params_t layer_params(const Shape &s, incmoe_comm_t *comm, const std::vector<uint8_t> &g,
                                 const std::vector<uint8_t> &u, const std::vector<uint8_t> &d,
                                 int max_tokens = 64);

/* A forward of rank's part of p (x, its topk ids and weights, every rank's counts) with mode
   and routing; the caller adds what else it sets. */
incmoe_moe_forward_params_t forward_params(const Problem &p, int rank, incmoe_moe_mode_t mode,
                                           incmoe_moe_routing_t routing);

/* rank's output rows of p from a forward's view, copied into *out. */
void copy_output(const Problem &p, int rank, const void *view, std::vector<uint8_t> *out);

/* Destroys L; *err, when still "", gets destroy's failure. */
void destroy_layer(incmoe_moe_t *L, std::string *err);

/* A switch and N rank processes, each running body on a communicator of algo (one BLAS thread);
   every rank must return "". */
void run_on_ranks(int N, incmoe_algo_t algo,
                  const std::function<std::string(incmoe_comm_t *comm, int rank)> &body,
                  int timeout_s = 150);

} // namespace moeref

#endif
