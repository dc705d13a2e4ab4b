// Small-M fp32 GEMM for CPU decoding: y (M, N) = x (M, K) @ w (K, N) [+ bias], for the 2-16 rows of a
// speculative verification step.
//
// Why: at batch 1 the target's forward streams every weight from DRAM once. MKL's GEMV does that at M = 1,
// but its GEMM at M = 2..16 re-packs the whole weight on every call (read, write, read again), so verifying
// γ + 1 tokens cost 1.4-2x a one-token step on a 2-core box, which decides whether speculation pays at all.
// Here the weight is packed once, at load, into column blocks of BLOCK columns, (ceil(N / BLOCK), K, BLOCK), so
// each block streams contiguously and all M rows are multiplied against it while it is in registers: the
// weight is read once per call whatever M is (up to ROWS rows per pass; a block re-read from L2 after that).
// Each output row is accumulated in the same order whatever M is, so a row's result does not depend on how
// many rows were verified with it.
// No software prefetch: each thread streams its blocks contiguously, which the hardware prefetcher follows. An
// explicit _mm_prefetch 16 block rows ahead made 4-5 rows cost 1.24x one row on an AMD EPYC (the target's 121
// matmuls timed by row count, 1-5 and 7; without it 1-5 rows cost the same): the step in v(γ) between γ = 2 and 3.
// The same kernel reads float16-packed weights (converted to float32 in registers, float32 accumulation) for
// drafts, whose numerics only move acceptance, never the output: half the bytes of a memory-bound draft step.
// And int8-packed weights with one float32 scale per output column (w[k, n] ~= q[k, n] * scale[n]): a quarter
// of the bytes, so a 2-layer draft's ~16 MB stays in a 32 MB L3 between its steps of one round.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>

constexpr int BLOCK = 64;     // columns per block: four 16-float AVX-512 registers
constexpr int ROWS = 6;       // rows per pass: 6 x 4 accumulators + 4 weight registers fit the 32 registers

static inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
static inline __m512 load16(const at::Half* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
static inline __m512 load16(const int8_t* p) {  // exact: int8 -> int32 -> float32; the scale comes after the sum
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

template <int R, typename W>
static void block_product(const float* __restrict x, int64_t K, const W* __restrict wb, float* __restrict out) {
  // x: (R, K) rows, wb: (K, BLOCK) one packed block, out: (R, BLOCK)
  __m512 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < 4; ++q) acc[r][q] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const W* wk = wb + k * BLOCK;
    __m512 w[4];
    for (int q = 0; q < 4; ++q) w[q] = load16(wk + 16 * q);
    for (int r = 0; r < R; ++r) {
      const __m512 xr = _mm512_set1_ps(x[r * K + k]);
      for (int q = 0; q < 4; ++q) acc[r][q] = _mm512_fmadd_ps(xr, w[q], acc[r][q]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < 4; ++q) _mm512_storeu_ps(out + r * BLOCK + 16 * q, acc[r][q]);
}

template <typename W>
using BlockFn = void (*)(const float*, int64_t, const W*, float*);
template <typename W>
static const BlockFn<W> kBlockFns[ROWS] = {block_product<1, W>, block_product<2, W>, block_product<3, W>,
                                           block_product<4, W>, block_product<5, W>, block_product<6, W>};

// w: (K, N) float32 -> packed (ceil(N / BLOCK), K, BLOCK) float32 or float16, the last block zero-padded;
// an int8 w (already quantised, see decode/smallgemm.py) is packed as int8
torch::Tensor pack(const torch::Tensor& w, bool half) {
  TORCH_CHECK(w.dim() == 2 && (w.scalar_type() == torch::kFloat32 || w.scalar_type() == torch::kChar) &&
              w.device().is_cpu(), "smallgemm.pack wants a 2-D float32 (or quantised int8) CPU tensor (in, out)");
  const int64_t K = w.size(0), N = w.size(1), blocks = (N + BLOCK - 1) / BLOCK;
  const auto dtype = w.scalar_type() == torch::kChar ? torch::kChar : (half ? torch::kHalf : torch::kFloat32);
  auto padded = torch::zeros({K, blocks * BLOCK}, w.options().dtype(dtype));
  padded.narrow(1, 0, N).copy_(w);
  return padded.view({K, blocks, BLOCK}).permute({1, 0, 2}).contiguous();
}

template <typename W>
static void product(const float* xp, const W* pp, const float* bp, const float* sp, float* yp, int64_t M,
                    int64_t K, int64_t blocks, int64_t n_out) {
  // sp: per-column scales (int8 weights) or nullptr
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    float out[ROWS * BLOCK];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t n0 = b * BLOCK, width = std::min<int64_t>(BLOCK, n_out - n0);
      for (int64_t r0 = 0; r0 < M; r0 += ROWS) {
        const int R = static_cast<int>(std::min<int64_t>(ROWS, M - r0));
        kBlockFns<W>[R - 1](xp + r0 * K, K, pp + b * K * BLOCK, out);
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
// weights (else None) -> (M, N) float32
torch::Tensor mm(const torch::Tensor& x, const torch::Tensor& packed, int64_t n_out,
                 const c10::optional<torch::Tensor>& bias, const c10::optional<torch::Tensor>& scale) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat32 && x.device().is_cpu(),
              "smallgemm.mm wants a contiguous 2-D float32 CPU input");
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
    product(xp, packed.data_ptr<int8_t>(), bp, sp, y.data_ptr<float>(), M, K, blocks, n_out);
  else if (packed.scalar_type() == torch::kHalf)
    product(xp, packed.data_ptr<at::Half>(), bp, sp, y.data_ptr<float>(), M, K, blocks, n_out);
  else
    product(xp, packed.data_ptr<float>(), bp, sp, y.data_ptr<float>(), M, K, blocks, n_out);
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("pack", &pack, "pack a (K, N) weight into column blocks (float16 when half; int8 stays int8)");
  m.def("mm", &mm, "x @ w (+ bias) for a few rows against a packed weight (int8: times per-column scales)",
        py::arg("x"), py::arg("packed"), py::arg("n_out"), py::arg("bias"), py::arg("scale") = py::none());
}
