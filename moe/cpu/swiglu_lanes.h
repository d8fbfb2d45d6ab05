/*
 * swiglu_lanes.h - the body of swiglu.c for one vector width, included once per width with
 * LANES (elements of a vector) and LANES_NAME(x) (a name per width) defined: the same
 * operations in the same order at every width, so with contraction off (swiglu.c) every
 * width gives the same bits.
 */
typedef float LANES_NAME(f32v) __attribute__((vector_size(4 * LANES)));
typedef int32_t LANES_NAME(i32v) __attribute__((vector_size(4 * LANES)));

static inline LANES_NAME(f32v) LANES_NAME(splat)(float v)
{
    LANES_NAME(f32v) r;
    for (int i = 0; i < LANES; i++)
        r[i] = v;
    return r;
}

/* Lane by lane: a where mask is set, else b. */
static inline LANES_NAME(f32v)
    LANES_NAME(select)(LANES_NAME(i32v) mask, LANES_NAME(f32v) a, LANES_NAME(f32v) b)
{
    LANES_NAME(i32v) ia, ib;
    memcpy(&ia, &a, sizeof(ia));
    memcpy(&ib, &b, sizeof(ib));
    ia = (ia & mask) | (ib & ~mask);
    memcpy(&a, &ia, sizeof(a));
    return a;
}

/* exp(x), x clamped to [-87.3, 88.3] so 2^n stays a normal number. */
static inline LANES_NAME(f32v) LANES_NAME(exp)(LANES_NAME(f32v) x)
{
    x = LANES_NAME(select)(x < LANES_NAME(splat)(88.3f), x, LANES_NAME(splat)(88.3f));
    x = LANES_NAME(select)(x > LANES_NAME(splat)(-87.3f), x, LANES_NAME(splat)(-87.3f));
    /* n = round(x / ln 2): +/- 0.5 then truncation toward zero */
    LANES_NAME(f32v) t = x * LANES_NAME(splat)(1.44269504088896341f);
    t = t + LANES_NAME(select)(t < LANES_NAME(splat)(0.0f), LANES_NAME(splat)(-0.5f),
                               LANES_NAME(splat)(0.5f));
    LANES_NAME(i32v) n = __builtin_convertvector(t, LANES_NAME(i32v));
    LANES_NAME(f32v) fn = __builtin_convertvector(n, LANES_NAME(f32v));
    LANES_NAME(f32v) r = x - fn * LANES_NAME(splat)(0.693359375f);
    r = r - fn * LANES_NAME(splat)(-2.12194440e-4f);
    LANES_NAME(f32v) p = LANES_NAME(splat)(1.9875691500E-4f);
    p = p * r + LANES_NAME(splat)(1.3981999507E-3f);
    p = p * r + LANES_NAME(splat)(8.3334519073E-3f);
    p = p * r + LANES_NAME(splat)(4.1665795894E-2f);
    p = p * r + LANES_NAME(splat)(1.6666665459E-1f);
    p = p * r + LANES_NAME(splat)(5.0000001201E-1f);
    p = p * r * r + r + LANES_NAME(splat)(1.0f);
    LANES_NAME(i32v) bits;
    memcpy(&bits, &p, sizeof(bits));
    bits += n << 23;
    memcpy(&p, &bits, sizeof(p));
    return p;
}

static inline void LANES_NAME(block)(float *act, const float *g, const float *u)
{
    LANES_NAME(f32v) vg, vu;
    memcpy(&vg, g, sizeof(vg));
    memcpy(&vu, u, sizeof(vu));
    LANES_NAME(f32v) a = vg / (LANES_NAME(splat)(1.0f) + LANES_NAME(exp)(-vg)) * vu;
    memcpy(act, &a, sizeof(a));
}

/* Every element through a whole vector: a tail is padded. */
static void LANES_NAME(swiglu)(float *act, const float *g, const float *u, size_t n)
{
    size_t i = 0;
    for (; i + LANES <= n; i += LANES)
        LANES_NAME(block)(act + i, g + i, u + i);
    if (i == n)
        return;
    float tg[LANES] = {0}, tu[LANES] = {0}, ta[LANES];
    memcpy(tg, g + i, (n - i) * sizeof(float));
    memcpy(tu, u + i, (n - i) * sizeof(float));
    LANES_NAME(block)(ta, tg, tu);
    memcpy(act + i, ta, (n - i) * sizeof(float));
}
