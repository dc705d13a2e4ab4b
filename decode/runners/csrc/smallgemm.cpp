// Small-M fp32 GEMM for CPU decoding: y (M, N) = x (M, K) @ w (K, N) [+ bias], for the 2-16 rows of a
// speculative verification step.
//
// Why: at batch 1 the target's forward streams every weight from DRAM once. MKL's GEMV does that at M = 1,
// but its GEMM at M = 2..16 re-packs the whole weight on every call (read, write, read again), so verifying
// γ + 1 tokens cost 1.4-2x a one-token step on a 2-core box (1.5-3.2x on an AVX2 AMD EPYC), which decides
// whether speculation pays at all. Here the weight is packed once, at load, into column blocks of BLOCK columns,
// (ceil(N / BLOCK), K, BLOCK), so each block streams contiguously and all M rows are multiplied against it while
// it is in registers: the weight is read from DRAM once per call whatever M is (up to ROWS rows per pass; a block
// re-read from L2 after that). ROWS = 7: a 6-node token tree and its root in one pass.
// Each output column is a sequential sum over k, one fused multiply-add at a time from zero, whatever M is and
// whichever ISA below runs it: a row's result does not depend on how many rows were verified with it, and the
// AVX-512 and AVX2 builds give bitwise the same result (the portable build may differ: no FMA unless its
// compiler contracts one).
// One source, three builds (decode/smallgemm.py: one extension per ISA, chosen by the compiler flags):
//   __AVX512F__            a 64-column block is four 16-float zmm registers; 6 rows x 4 accumulators + 4 weight
//                          registers fit the 32 registers (7 rows: one weight register at a time)
//   __AVX2__ + FMA + F16C  16 ymm registers hold 16 columns of 6 rows (2 weight + 6 x 2 accumulator + 1 broadcast
//                          = 15; 7 rows: one weight register at a time, 16), so this build packs each 64-column block as four 16-column sub-blocks one after
//                          the other, (4, K, 16): a pass over one sub-block is one contiguous run. Fewer rows take
//                          several sub-blocks at once (kStreams), each its own sequential stream.
//   anything else          the same loops in plain C++ for the compiler to vectorise: each weight still read once
// Software prefetch, `pf` bytes ahead of each stream (0: none; decode.runners times both at a runner's build and
// keeps the faster). With 4 or more rows the FMAs between two cache lines hide less of the DRAM latency than the
// hardware prefetcher alone covers: on a Sapphire Rapids, 5 rows cost 1.8-1.95x one row without it and 1.26-1.33x
// with 4 KB (2 threads; docs/results.md, issue 40). On an AMD EPYC an earlier layout measured the opposite (1-5
// rows the same cost without it, 1.24x with it), hence a timed choice and not a constant.
// The same kernel reads float16-packed weights (converted to float32 in registers, float32 accumulation) for
// drafts, whose numerics only move acceptance, never the output: half the bytes of a memory-bound draft step.
// And int8-packed weights with one float32 scale per output column (w[k, n] ~= q[k, n] * scale[n]): a quarter
// of the bytes, so a 2-layer draft's ~16 MB stays in a 32 MB L3 between its steps of one round.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

constexpr int BLOCK = 64;     // columns per block (every ISA; the AVX2 build orders a block by SUB columns)
constexpr int ROWS = 7;       // rows per pass (a 6-node token tree and its root)

#if defined(__AVX512F__)
static const char* kIsa = "avx512";
constexpr int SUB = BLOCK;  // columns a block stores contiguously per k (packing below)

static inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
static inline __m512 load16(const at::Half* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
static inline __m512 load16(const int8_t* p) {  // exact: int8 -> int32 -> float32; the scale comes after the sum
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

template <int R, typename W>
static void block_product(const float* __restrict x, int64_t K, const W* __restrict wb, float* __restrict out,
                          int64_t pf) {
  // x: (R, K) rows, wb: (K, BLOCK) one packed block, out: (R, BLOCK)
  __m512 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < 4; ++q) acc[r][q] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const W* wk = wb + k * BLOCK;
    if (pf)
      for (int l = 0; l < int(BLOCK * sizeof(W)); l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(wk) + pf + l, _MM_HINT_T0);
    if constexpr (R <= 6) {
      __m512 w[4];
      for (int q = 0; q < 4; ++q) w[q] = load16(wk + 16 * q);
      for (int r = 0; r < R; ++r) {
        const __m512 xr = _mm512_set1_ps(x[r * K + k]);
        for (int q = 0; q < 4; ++q) acc[r][q] = _mm512_fmadd_ps(xr, w[q], acc[r][q]);
      }
    } else {  // 7 rows: 28 accumulators, one weight register at a time, each broadcast taken again per register
      for (int q = 0; q < 4; ++q) {
        const __m512 w = load16(wk + 16 * q);
        for (int r = 0; r < R; ++r) acc[r][q] = _mm512_fmadd_ps(_mm512_set1_ps(x[r * K + k]), w, acc[r][q]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < 4; ++q) _mm512_storeu_ps(out + r * BLOCK + 16 * q, acc[r][q]);
}

#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
static const char* kIsa = "avx2";
static inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
static inline __m256 load8(const at::Half* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
static inline __m256 load8(const int8_t* p) {  // exact, as above
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// R rows take as many 16-column sub-blocks at once as their accumulators allow: all four for one row (8
// accumulators, latency-bound chains otherwise), two for 2-3 rows (up to 12 accumulators + 3 broadcasts + 1 weight),
// one for 4-7 (the registers above). The summation order of every column is the same in each.
constexpr int SUB = 16;
template <int R>
constexpr int kStreams = R == 1 ? 4 : R <= 3 ? 2 : 1;

template <int R, typename W>
static void block_product(const float* __restrict x, int64_t K, const W* __restrict wb, float* __restrict out,
                          int64_t pf) {
  // x: (R, K) rows, wb: (BLOCK / SUB, K, SUB) one packed block, out: (R, BLOCK)
  constexpr int S = kStreams<R>, Q = 2 * S;
  for (int s0 = 0; s0 < BLOCK / SUB; s0 += S) {
    const W* ws = wb + s0 * K * SUB;
    __m256 acc[R][Q];
    for (int r = 0; r < R; ++r)
      for (int q = 0; q < Q; ++q) acc[r][q] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; ++k) {
      if (pf) {
        for (int i = 0; i < S; ++i)
          _mm_prefetch(reinterpret_cast<const char*>(ws + i * K * SUB + k * SUB) + pf, _MM_HINT_T0);
        // one stream (4-7 rows) keeps too few lines in flight for its FMAs to hide DRAM's latency: a second
        // prefetch, four times as far, into L2 (5 rows: 25.2 -> 23.1 ms a pass of the default target, forced AVX2)
        if constexpr (S == 1)
          _mm_prefetch(reinterpret_cast<const char*>(ws + k * SUB) + 4 * pf, _MM_HINT_T1);
      }
      if constexpr (S == 1 && R <= 6) {
        const __m256 w0 = load8(ws + k * SUB), w1 = load8(ws + k * SUB + 8);
        for (int r = 0; r < R; ++r) {
          const __m256 xr = _mm256_broadcast_ss(x + r * K + k);
          acc[r][0] = _mm256_fmadd_ps(xr, w0, acc[r][0]);
          acc[r][1] = _mm256_fmadd_ps(xr, w1, acc[r][1]);
        }
      } else if constexpr (S == 1) {  // 7 rows: 14 accumulators + 1 weight + 1 broadcast, each broadcast taken twice
        for (int q = 0; q < 2; ++q) {
          const __m256 w = load8(ws + k * SUB + 8 * q);
          for (int r = 0; r < R; ++r) acc[r][q] = _mm256_fmadd_ps(_mm256_broadcast_ss(x + r * K + k), w, acc[r][q]);
        }
      } else {
        __m256 xr[R];
        for (int r = 0; r < R; ++r) xr[r] = _mm256_broadcast_ss(x + r * K + k);
        for (int q = 0; q < Q; ++q) {
          const __m256 w = load8(ws + (q / 2) * K * SUB + k * SUB + 8 * (q % 2));
          for (int r = 0; r < R; ++r) acc[r][q] = _mm256_fmadd_ps(xr[r], w, acc[r][q]);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int q = 0; q < Q; ++q) _mm256_storeu_ps(out + r * BLOCK + s0 * SUB + 8 * q, acc[r][q]);
  }
}

#else
static const char* kIsa = "portable";
constexpr int SUB = BLOCK;  // columns a block stores contiguously per k (packing below)

template <int R, typename W>
static void block_product(const float* __restrict x, int64_t K, const W* __restrict wb, float* __restrict out,
                          int64_t pf) {
  // the same order as above (each column summed over k from zero), in loops the compiler vectorises over j
  float acc[R][BLOCK];
  std::memset(acc, 0, sizeof(acc));
  for (int64_t k = 0; k < K; ++k) {
    const W* wk = wb + k * BLOCK;
    if (pf)
      for (int l = 0; l < int(BLOCK * sizeof(W)); l += 64)
        __builtin_prefetch(reinterpret_cast<const char*>(wk) + pf + l);
    float w[BLOCK];
    for (int j = 0; j < BLOCK; ++j) w[j] = static_cast<float>(wk[j]);
    for (int r = 0; r < R; ++r) {
      const float xr = x[r * K + k];
      for (int j = 0; j < BLOCK; ++j) acc[r][j] += xr * w[j];
    }
  }
  std::memcpy(out, acc, sizeof(float) * R * BLOCK);
}
#endif

template <typename W>
using BlockFn = void (*)(const float*, int64_t, const W*, float*, int64_t);
template <typename W>
static const BlockFn<W> kBlockFns[ROWS] = {block_product<1, W>, block_product<2, W>, block_product<3, W>,
                                           block_product<4, W>, block_product<5, W>, block_product<6, W>,
                                           block_product<7, W>};

// w: (K, N) float32 -> packed (ceil(N / BLOCK), K, BLOCK) float32 or float16 (each block (BLOCK / SUB, K, SUB)
// inside), the last block zero-padded;
// an int8 w (already quantised, see decode/smallgemm.py) is packed as int8
torch::Tensor pack(const torch::Tensor& w, bool half) {
  TORCH_CHECK(w.dim() == 2 && (w.scalar_type() == torch::kFloat32 || w.scalar_type() == torch::kChar) &&
              w.device().is_cpu(), "smallgemm.pack wants a 2-D float32 (or quantised int8) CPU tensor (in, out)");
  const int64_t K = w.size(0), N = w.size(1), blocks = (N + BLOCK - 1) / BLOCK;
  const auto dtype = w.scalar_type() == torch::kChar ? torch::kChar : (half ? torch::kHalf : torch::kFloat32);
  auto padded = torch::zeros({K, blocks * BLOCK}, w.options().dtype(dtype));
  padded.narrow(1, 0, N).copy_(w);
  if (SUB < BLOCK)  // (blocks, BLOCK / SUB, K, SUB), kept under the (blocks, K, BLOCK) shape mm() checks
    return padded.view({K, blocks, BLOCK / SUB, SUB}).permute({1, 2, 0, 3}).contiguous().view({blocks, K, BLOCK});
  return padded.view({K, blocks, BLOCK}).permute({1, 0, 2}).contiguous();
}

template <typename W>
static void product(const float* xp, const W* pp, const float* bp, const float* sp, float* yp, int64_t M,
                    int64_t K, int64_t blocks, int64_t n_out, int64_t pf) {
  // sp: per-column scales (int8 weights) or nullptr
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    float out[ROWS * BLOCK];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t n0 = b * BLOCK, width = std::min<int64_t>(BLOCK, n_out - n0);
      for (int64_t r0 = 0; r0 < M; r0 += ROWS) {
        const int R = static_cast<int>(std::min<int64_t>(ROWS, M - r0));
        kBlockFns<W>[R - 1](xp + r0 * K, K, pp + b * K * BLOCK, out, pf);
        for (int r = 0; r < R; ++r) {
          float* yr = yp + (r0 + r) * n_out + n0;
          const float* o = out + r * BLOCK;
          for (int64_t j = 0; j < width; ++j) {
            const float s = sp ? o[j] * sp[n0 + j] : o[j];
            yr[j] = bp ? s + bp[n0 + j] : s;
          }
        }
      }
    }
  });
}

// x: (M, K) float32 contiguous, packed from pack(), n_out = N, bias (N,) or None, scale (N,) float32 for int8
// weights (else None), pf: prefetch distance in bytes (0: none) -> (M, N) float32
torch::Tensor mm(const torch::Tensor& x, const torch::Tensor& packed, int64_t n_out,
                 const c10::optional<torch::Tensor>& bias, const c10::optional<torch::Tensor>& scale, int64_t pf) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat32 && x.device().is_cpu(),
              "smallgemm.mm wants a contiguous 2-D float32 CPU input");
  TORCH_CHECK(pf >= 0, "smallgemm.mm: the prefetch distance pf is a byte count >= 0");
  const int64_t M = x.size(0), K = x.size(1), blocks = packed.size(0);
  TORCH_CHECK(packed.dim() == 3 && packed.size(1) == K && packed.size(2) == BLOCK &&
              blocks * BLOCK >= n_out && (blocks - 1) * BLOCK < n_out, "smallgemm.mm: packed weight does not fit x");
  const float* bp = nullptr;
  if (bias.has_value()) {
    TORCH_CHECK(bias->is_contiguous() && bias->numel() == n_out && bias->scalar_type() == torch::kFloat32,
                "smallgemm.mm: bias must be a contiguous float32 (N,)");
    bp = bias->data_ptr<float>();
  }
  const bool int8 = packed.scalar_type() == torch::kChar;
  TORCH_CHECK(int8 == scale.has_value(), "smallgemm.mm: int8 weights need their (N,) scales, other weights none");
  const float* sp = nullptr;
  if (int8) {
    TORCH_CHECK(scale->is_contiguous() && scale->numel() == n_out && scale->scalar_type() == torch::kFloat32,
                "smallgemm.mm: scale must be a contiguous float32 (N,)");
    sp = scale->data_ptr<float>();
  }
  auto y = torch::empty({M, n_out}, x.options());
  const float* xp = x.data_ptr<float>();
  if (int8)
    product(xp, packed.data_ptr<int8_t>(), bp, sp, y.data_ptr<float>(), M, K, blocks, n_out, pf);
  else if (packed.scalar_type() == torch::kHalf)
    product(xp, packed.data_ptr<at::Half>(), bp, sp, y.data_ptr<float>(), M, K, blocks, n_out, pf);
  else
    product(xp, packed.data_ptr<float>(), bp, sp, y.data_ptr<float>(), M, K, blocks, n_out, pf);
  return y;
}

// decode/csrc/attention.cpp, compiled into the same module
torch::Tensor rows_attention(const torch::Tensor& qkv, torch::Tensor& kc, torch::Tensor& vc, int64_t start,
                             const torch::Tensor& cos, const torch::Tensor& sin,
                             const c10::optional<torch::Tensor>& mask, int64_t heads, int64_t kv_heads);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("isa", [] { return std::string(kIsa); }, "which of the ISA paths above this build compiled");
  m.def("pack", &pack, "pack a (K, N) weight into column blocks (float16 when half; int8 stays int8)");
  m.def("mm", &mm, "x @ w (+ bias) for a few rows against a packed weight (int8: times per-column scales)",
        py::arg("x"), py::arg("packed"), py::arg("n_out"), py::arg("bias"), py::arg("scale") = py::none(),
        py::arg("pf") = 0);
  m.def("rows_attention", &rows_attention, "one layer's RoPE, cache write and attention for a few query rows");
}
