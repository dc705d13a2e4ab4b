// One layer's attention for the few query rows of a CPU decoding step (1 token, a verification, a token tree):
// RoPE on the new queries and keys, the keys and values written into the layer's static cache, and attention over
// the cache, in one call.
//
// Why: at batch 1 on a CPU these are a dozen tiny torch ops per layer (chunk, cat, two multiplies and an add per
// RoPE, the cache writes, the attention's matmuls or SDPA), each ~5-50 us of dispatch and thread start-up for
// under a microsecond of arithmetic: 3-4 ms of a ~30 ms one-token step of the default target (docs/results.md,
// issue 40). Here they cost one call.
// Each (query head, row) is computed alone, in the same order whatever the number of rows: a row's result does
// not depend on how many rows were verified with it, so a verification agrees with one-token steps bitwise.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

// q_r . k_j for R queries q_r (hd apart) and 8 keys k_0..k_7 (hd apart; hd a multiple of 8), scaled, into
// out[r stride .. r stride + 8): each key's load is shared by the R queries. Each score is summed the same way whatever R is and
// wherever the key sits (lanes of d in order, then pairwise), so a score does not depend on its neighbours.
template <int R>
static inline void dots8(const float* __restrict q, const float* __restrict k, int64_t hd, float scale,
                         float* __restrict out, int64_t stride) {
  __m256 a[R][8];
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) a[r][j] = _mm256_setzero_ps();
  for (int64_t d = 0; d < hd; d += 8) {
    __m256 qd[R];
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) qd[r] = _mm256_loadu_ps(q + r * hd + d);
    #pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m256 kd = _mm256_loadu_ps(k + j * hd + d);
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r) a[r][j] = _mm256_fmadd_ps(qd[r], kd, a[r][j]);
    }
  }
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {  // hadd twice: [k0..k3 low halves | k0..k3 high halves], k4..k7 alike; halves added
    const __m256 c0 = _mm256_hadd_ps(_mm256_hadd_ps(a[r][0], a[r][1]), _mm256_hadd_ps(a[r][2], a[r][3]));
    const __m256 c1 = _mm256_hadd_ps(_mm256_hadd_ps(a[r][4], a[r][5]), _mm256_hadd_ps(a[r][6], a[r][7]));
    const __m256 s = _mm256_add_ps(_mm256_permute2f128_ps(c0, c1, 0x20), _mm256_permute2f128_ps(c0, c1, 0x31));
    _mm256_storeu_ps(out + r * stride, _mm256_mul_ps(s, _mm256_set1_ps(scale)));
  }
}

// exp(x) for x <= 0 (a score less its row's maximum): Cephes' degree-5 polynomial on x - n ln 2, times 2^n;
// 0 below -87 (and for -inf, a masked key)
static inline __m256 exp8(__m256 x) {
  const __m256 dead = _mm256_cmp_ps(x, _mm256_set1_ps(-87.f), _CMP_LT_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.f));
  const __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  // ln 2 in two parts: the first exact in float
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  for (const float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f})
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(c));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(dead, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}
#endif

static inline float dot(const float* __restrict a, const float* __restrict b, int64_t d) {
  float s = 0.f;
  for (int64_t i = 0; i < d; ++i) s += a[i] * b[i];
  return s;
}
// out (d,) = x rotated: HF's rotate_half convention, x * cos + cat(-x2, x1) * sin
static inline void rope(const float* __restrict x, const float* __restrict c, const float* __restrict s,
                        float* __restrict out, int64_t d) {
  const int64_t h = d / 2;
  for (int64_t j = 0; j < h; ++j) out[j] = x[j] * c[j] - x[j + h] * s[j];
  for (int64_t j = h; j < d; ++j) out[j] = x[j] * c[j] + x[j - h] * s[j];
}

// o (hd,) = softmax(q . k_j * scale over the keys j < end that mi allows (all if mi is null)) . v, one float at a
// time (the portable build, or a head size off the 8-float lanes). p: room for end floats.
static void attend_scalar(const float* __restrict q, const float* __restrict keys, const float* __restrict vals,
                          const bool* mi, int64_t end, int64_t hd, float scale, float* __restrict p,
                          float* __restrict o) {
  float top = -std::numeric_limits<float>::infinity(), sum = 0.f;
  for (int64_t j = 0; j < end; ++j) {
    p[j] = (!mi || mi[j]) ? dot(q, keys + j * hd, hd) * scale : -std::numeric_limits<float>::infinity();
    top = std::max(top, p[j]);
  }
  for (int64_t j = 0; j < end; ++j) {
    p[j] = std::exp(p[j] - top);
    sum += p[j];
  }
  std::fill(o, o + hd, 0.f);
  for (int64_t j = 0; j < end; ++j) {
    if (p[j] == 0.f) continue;  // masked out (or underflowed): adds nothing
    const float* vj = vals + j * hd;
    for (int64_t d = 0; d < hd; ++d) o[d] += p[j] * vj[d];
  }
  for (int64_t d = 0; d < hd; ++d) o[d] /= sum;
}

#if defined(__AVX2__) && defined(__FMA__)
constexpr int64_t KEYS = 32;  // keys a block: their K or V rows (8 KB at hd 64) stay in L1 across the queries

// o_r[0 .. 8C) += sum over j0 <= j < j1 of p_rj v_j[0 .. 8C) for R queries (p_r = p + r pstride), in registers,
// each column summed over j in order whatever R is; each V load shared by the R queries. A masked (or
// underflowed) p_rj = 0 adds exact zeros.
template <int C, int R>
static inline void pv(const float* __restrict p, int64_t pstride, const float* __restrict vals, int64_t j0,
                      int64_t j1, int64_t hd, float* const* o, int64_t d0) {
  __m256 acc[R][C];
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_loadu_ps(o[r] + d0 + 8 * c);
  for (int64_t j = j0; j < j1; ++j) {
    __m256 w[R];
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) w[r] = _mm256_broadcast_ss(p + r * pstride + j);
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m256 vj = _mm256_loadu_ps(vals + j * hd + d0 + 8 * c);
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(w[r], vj, acc[r][c]);
    }
  }
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) _mm256_storeu_ps(o[r] + d0 + 8 * c, acc[r][c]);
}

// Queries a pass over a key block takes together, sharing each K and V load: at a long context the extra queries of
// a verification (group x rows of them) are arithmetic on keys already in L1. 32 vector registers (AVX-512VL) hold
// 3 queries' 8 accumulators; AVX2's 16 hold one query's (more would spill to the stack every key).
#if defined(__AVX512VL__)
constexpr int RQ = 3;
#else
constexpr int RQ = 1;
#endif

// o_r += sum over j0 <= j < j1 of p_rj v_j for R queries, every column of hd: 64 at a time, then 8
template <int R>
static inline void pv_rows(const float* __restrict p, int64_t pstride, const float* __restrict vals, int64_t j0,
                           int64_t j1, int64_t hd, float* const* o) {
  int64_t d0 = 0;
  for (; d0 + 64 <= hd; d0 += 64) pv<8, R>(p, pstride, vals, j0, j1, hd, o, d0);
  for (; d0 < hd; d0 += 8) pv<1, R>(p, pstride, vals, j0, j1, hd, o, d0);
}

// The same for Q queries sharing one K/V head (hd a multiple of 8), over one block of `end` keys, key blocks
// outermost so each is read from memory once for all Q. q: (Q, hd); masks[r]: query r's mask row over these keys or
// null; p: (Q, padded) scratch; pad: 8 hd. -> o[r] (hd,) = sum_j exp(s_rj - top_r) v_j, not yet divided by
// sums[r] = sum_j exp(s_rj - top_r); tops[r] = max_j s_rj (-inf, with o[r] = 0 and sums[r] = 0, where the mask hides
// every key). A query's scores, sums and output are formed the same way whatever Q and `end` are: the keys past the
// last full 8 go through a zero-padded copy, masked scores add exact zeros, and each output column is summed over
// j in order.
static void attend_group(const float* __restrict q, int64_t Q, const float* __restrict keys,
                         const float* __restrict vals, const bool* const* masks, int64_t end, int64_t hd,
                         float scale, float* __restrict p, float* __restrict tops, float* __restrict sums,
                         float* __restrict pad, float* const* o) {
  const float neg = -std::numeric_limits<float>::infinity();
  const int64_t padded = (end + 7) / 8 * 8;
  for (int64_t j0 = 0; j0 < end; j0 += 8) {  // scores, (Q, padded)
    const float* kb = keys + j0 * hd;
    if (j0 + 8 > end) {
      std::fill(pad, pad + 8 * hd, 0.f);
      std::copy(kb, kb + (end - j0) * hd, pad);
      kb = pad;
    }
    int64_t r = 0;
    for (; r + RQ <= Q; r += RQ) dots8<RQ>(q + r * hd, kb, hd, scale, p + r * padded + j0, padded);
    for (; r < Q; ++r) dots8<1>(q + r * hd, kb, hd, scale, p + r * padded + j0, padded);
  }
  for (int64_t r = 0; r < Q; ++r) {  // exp(score - max) and its sum, by lanes
    float* pr = p + r * padded;
    float top = neg, sum = 0.f;
    for (int64_t j = end; j < padded; ++j) pr[j] = neg;
    if (masks[r]) {  // a long context's mask row is true but for its last few keys: skip to its first false
      const void* hidden = std::memchr(masks[r], 0, end);
      for (int64_t j = hidden ? static_cast<const bool*>(hidden) - masks[r] : end; j < end; ++j)
        if (!masks[r][j]) pr[j] = neg;
    }
    __m256 mx = _mm256_set1_ps(neg);
    for (int64_t j0 = 0; j0 < padded; j0 += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(pr + j0));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, mx);
    for (int l = 0; l < 8; ++l) top = std::max(top, lanes[l]);
    std::fill(o[r], o[r] + hd, 0.f);
    tops[r] = top;
    if (top == neg) {  // every key of this block hidden from this query (a later block of a long context)
      std::fill(pr, pr + padded, 0.f);
      sums[r] = 0.f;
      continue;
    }
    __m256 acc = _mm256_setzero_ps();
    for (int64_t j0 = 0; j0 < padded; j0 += 8) {
      const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(pr + j0), _mm256_set1_ps(top)));
      _mm256_storeu_ps(pr + j0, e);
      acc = _mm256_add_ps(acc, e);
    }
    _mm256_store_ps(lanes, acc);
    for (int l = 0; l < 8; ++l) sum += lanes[l];
    sums[r] = sum;
  }
  for (int64_t j0 = 0; j0 < end; j0 += KEYS) {  // o_r = sum_j p_rj v_j, a block of V rows for every query
    const int64_t j1 = std::min(end, j0 + KEYS);
    int64_t r = 0;
    for (; r + RQ <= Q; r += RQ) pv_rows<RQ>(p + r * padded, padded, vals, j0, j1, hd, o + r);
    for (; r < Q; ++r) pv_rows<1>(p + r * padded, padded, vals, j0, j1, hd, o + r);
  }
}
#endif

// qkv: (n, (heads + 2 kv_heads) hd) this layer's projections of n new tokens; kc, vc: (kv_heads, max_len, hd)
// its cache, written at start..start + n - 1; cos, sin: (n, hd) for the new tokens' positions; mask: None (every
// new token sees the whole cache and itself: one token) or (n, start + n) bool, True where row i may attend.
// -> (n, heads hd), the heads side by side as o_proj takes them.
torch::Tensor rows_attention(const torch::Tensor& qkv, torch::Tensor& kc, torch::Tensor& vc, int64_t start,
                             const torch::Tensor& cos, const torch::Tensor& sin,
                             const c10::optional<torch::Tensor>& mask, int64_t heads, int64_t kv_heads) {
  TORCH_CHECK(qkv.dim() == 2 && qkv.is_contiguous() && qkv.scalar_type() == torch::kFloat32 && qkv.device().is_cpu(),
              "rows_attention wants a contiguous 2-D float32 CPU qkv");
  const int64_t n = qkv.size(0), hd = kc.size(2), end = start + n, width = (heads + 2 * kv_heads) * hd;
  TORCH_CHECK(heads % kv_heads == 0 && hd % 2 == 0 && qkv.size(1) == width, "rows_attention: qkv's width is not (heads + 2 kv_heads) hd");
  TORCH_CHECK(kc.is_contiguous() && vc.is_contiguous() && kc.sizes() == vc.sizes() && kc.size(0) == kv_heads &&
              kc.scalar_type() == torch::kFloat32 && vc.scalar_type() == torch::kFloat32 && end <= kc.size(1),
              "rows_attention: the cache must be two contiguous float32 (kv_heads, max_len, hd) with room for the rows");
  TORCH_CHECK(cos.is_contiguous() && sin.is_contiguous() && cos.size(0) == n && cos.size(1) == hd &&
              sin.sizes() == cos.sizes(), "rows_attention: cos and sin must be contiguous (n, hd)");
  TORCH_CHECK(mask.has_value() || n == 1, "rows_attention: more than one row needs a mask");
  const bool* mp = nullptr;
  if (mask.has_value()) {
    TORCH_CHECK(mask->is_contiguous() && mask->scalar_type() == torch::kBool && mask->size(0) == n &&
                mask->size(1) == end, "rows_attention: mask must be a contiguous (n, start + n) bool");
    mp = mask->data_ptr<bool>();
  }
  const float *x = qkv.data_ptr<float>(), *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
  float *kp = kc.data_ptr<float>(), *vp = vc.data_ptr<float>();
  const int64_t max_len = kc.size(1), group = heads / kv_heads;
  for (int64_t i = 0; i < n; ++i)  // the new keys (rotated) and values into the cache
    for (int64_t g = 0; g < kv_heads; ++g) {
      const float* row = x + i * width + (heads + g) * hd;
      rope(row, cp + i * hd, sp + i * hd, kp + (g * max_len + start + i) * hd, hd);
      std::copy(row + kv_heads * hd, row + kv_heads * hd + hd, vp + (g * max_len + start + i) * hd);
    }
  auto out = torch::empty({n, heads * hd}, qkv.options());
  float* op = out.data_ptr<float>();
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  // One task per K/V head, up to ROWS_A_TASK rows and one chunk of CHUNK keys: its group * rows queries read each
  // key block once. Chunks split a long context's keys between threads (one token has only kv_heads tasks
  // otherwise: 3 for 2 threads, one thread idle a third of the time) and keep a task's keys, values and scores in
  // L2. A chunk's partial result (its max, sum and unnormalised output) is combined with the others after. The
  // chunks are fixed stretches of the cache, whatever the thread count and the rows verified with a row, so a row's
  // result is bitwise the same however it is computed (a chunk a row's mask hides entirely is skipped); up to CHUNK
  // keys there is one chunk and the arithmetic is that of a single pass. Threads only above ~2^18 multiply-adds:
  // below, starting them costs more than they save (one token at a context of a few hundred: 7 us on one thread,
  // 20 us on two, on this project's 2-core box)
  constexpr int64_t ROWS_A_TASK = 4, CHUNK = 1024;
  bool lanes = false;
#if defined(__AVX2__) && defined(__FMA__)
  lanes = hd % 8 == 0;
#endif
  const int64_t pieces = (n + ROWS_A_TASK - 1) / ROWS_A_TASK, chunks = lanes ? (end + CHUNK - 1) / CHUNK : 1;
  const int64_t tasks = kv_heads * pieces * chunks, QA = group * ROWS_A_TASK;
  const int64_t grain = heads * n * end * hd < (int64_t{1} << 18) ? tasks : 1;
  // partial results, several chunks: (n, heads, chunks) of (top, sum, out[hd]); reused across calls (no page faults)
  static thread_local std::vector<float> partial;
  if (chunks > 1) partial.resize(n * heads * chunks * (hd + 2));
  float* part = partial.data();
  at::parallel_for(0, tasks, grain, [&](int64_t t0, int64_t t1) {
    std::vector<float> q(QA * hd), p(QA * (lanes ? std::min(CHUNK, (end + 7) / 8 * 8) : end)), pad(8 * hd),
        tops(QA), sums(QA);
    std::vector<const bool*> masks(QA);
    std::vector<float*> outs(QA);
    int64_t roped = -1;  // the (K/V head, rows) whose queries q holds: a task's chunks follow one another
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t c = t % chunks, g = t / chunks / pieces, i0 = t / chunks % pieces * ROWS_A_TASK;
      const int64_t rows = std::min(ROWS_A_TASK, n - i0), j0 = c * CHUNK, len = lanes ? std::min(CHUNK, end - j0) : end;
      int64_t Q = 0;
      for (int64_t h = g * group; h < (g + 1) * group; ++h)
        for (int64_t i = i0; i < i0 + rows; ++i, ++Q) {
          if (roped != t / chunks) rope(x + i * width + h * hd, cp + i * hd, sp + i * hd, q.data() + Q * hd, hd);
          masks[Q] = mp ? mp + i * end + j0 : nullptr;
          outs[Q] = chunks > 1 ? part + ((i * heads + h) * chunks + c) * (hd + 2) + 2 : op + i * heads * hd + h * hd;
        }
      roped = t / chunks;
      const float *keys = kp + (g * max_len + j0) * hd, *vals = vp + (g * max_len + j0) * hd;
#if defined(__AVX2__) && defined(__FMA__)
      if (lanes) {
        attend_group(q.data(), Q, keys, vals, masks.data(), len, hd, scale, p.data(), tops.data(), sums.data(),
                     pad.data(), outs.data());
        for (int64_t r = 0; r < Q; ++r) {
          if (chunks > 1) {  // kept for the combination below
            outs[r][-2] = tops[r];
            outs[r][-1] = sums[r];
            continue;
          }
          const float inv = 1.f / sums[r];
          for (int64_t d = 0; d < hd; ++d) outs[r][d] *= inv;
        }
        continue;
      }
#endif
      for (int64_t r = 0; r < Q; ++r)
        attend_scalar(q.data() + r * hd, keys, vals, masks[r], end, hd, scale, p.data(), outs[r]);
    }
  });
  if (chunks > 1)  // each (row, head): its chunks' outputs rescaled to the largest max, in chunk order
    at::parallel_for(0, n * heads, grain == 1 ? 1 : n * heads, [&](int64_t r0, int64_t r1) {
      std::vector<float> w(chunks);
      for (int64_t r = r0; r < r1; ++r) {
        const float* __restrict pr = part + r * chunks * (hd + 2);
        float top = -std::numeric_limits<float>::infinity(), sum = 0.f;
        for (int64_t c = 0; c < chunks; ++c) top = std::max(top, pr[c * (hd + 2)]);
        for (int64_t c = 0; c < chunks; ++c) {  // 0 for a chunk the row's mask hides entirely
          w[c] = pr[c * (hd + 2) + 1] == 0.f ? 0.f : std::exp(pr[c * (hd + 2)] - top);
          sum += w[c] * pr[c * (hd + 2) + 1];
        }
        float* __restrict o = op + r * hd;  // row r / heads, head r % heads: (n, heads * hd) is (n * heads, hd)
        std::fill(o, o + hd, 0.f);
        for (int64_t c = 0; c < chunks; ++c)
          if (w[c] != 0.f)
            for (int64_t d = 0; d < hd; ++d) o[d] += w[c] * pr[c * (hd + 2) + 2 + d];
        const float inv = 1.f / sum;
        for (int64_t d = 0; d < hd; ++d) o[d] *= inv;
      }
    });
  return out;
}
