// Batch-invariant linear layer for CPU (--deterministic): y [M, N] = x [M, K] @ W^T + bias,
// where each output element is the same float32 sum, in the same order, whatever M is,
// wherever its row sits in the batch, and however the work is split over threads.
//
// Why not torch's matmul: BLAS libraries pick kernels and K-blocking by shape, so a row's
// result changes with the number of rows beside it (measured: docs/PERFORMANCE.md).
//
// How: the weight is packed once into panels of 16 output columns, K-major
// (pack_invariant_weight). The micro-kernel keeps one 16-lane float32 accumulator per
// (row, panel) and walks k from 0 to K in order: acc += broadcast(x[r, k]) * panel[k].
// Lane n of that accumulator is then sum_k x[r, k] * W[n, k] in k order, a sequence that
// depends only on the row and the column; tiles of 1..6 rows and 1..2 panels, M, and the
// thread split only decide which accumulators exist side by side. No horizontal sums.
//
// Layouts (chosen at compile time, the same for every call on this build):
// - float32, and bfloat16 without AVX512-BF16: [P][K][16]: P = ceil(N / 16) panels;
// - bfloat16 with AVX512-BF16: [P][K2][16][2], K2 = ceil(K / 2): k in pairs for
//   vdpbf16ps, which adds both products of a pair into the float32 lane; an odd K's
//   last pair is padded with a zero weight.
// Columns past N (the last panel's padding) hold zeros and are never stored.
#include "ops.h"
#include "vec.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace {

constexpr int64_t kLanes = 16;   // output columns per panel
constexpr int kMaxRows = 6;      // rows per tile: 6 x 2 panels = 12 accumulators
constexpr int kMaxPanels = 2;

template <typename T>
constexpr bool kPairs =
#if defined(__AVX512BF16__)
    std::is_same_v<T, c10::BFloat16>;
#else
    false;
#endif

// ---- portable path: the same per-element order, plain loops ---------------------------

template <typename T>
void tile_portable(const T* x, int64_t K, const T* panels, int64_t panel_stride, int rows, int npanels,
                   float* acc /* [rows][npanels][16] */) {
    for (int r = 0; r < rows; ++r)
        for (int p = 0; p < npanels; ++p) {
            float* a = acc + (r * npanels + p) * kLanes;
            const T* w = panels + p * panel_stride;
            for (int64_t l = 0; l < kLanes; ++l) a[l] = 0.f;
            for (int64_t k = 0; k < K; ++k) {
                const float xv = static_cast<float>(x[r * K + k]);
                for (int64_t l = 0; l < kLanes; ++l) a[l] += xv * static_cast<float>(w[k * kLanes + l]);
            }
        }
}

#if defined(__AVX512F__)

// R rows x P panels, flat layout [K][16] per panel.
template <typename T, int R, int P>
void tile_flat(const T* x, int64_t K, const T* panels, int64_t panel_stride, float* acc) {
    __m512 a[R][P];
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) a[r][p] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; ++k) {
        __m512 w[P];
        for (int p = 0; p < P; ++p) w[p] = tokenmill::load16(panels + p * panel_stride + k * kLanes);
        for (int r = 0; r < R; ++r) {
            const __m512 xv = _mm512_set1_ps(static_cast<float>(x[r * K + k]));
            for (int p = 0; p < P; ++p) a[r][p] = _mm512_fmadd_ps(xv, w[p], a[r][p]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) _mm512_storeu_ps(acc + (r * P + p) * kLanes, a[r][p]);
}

#if defined(__AVX512BF16__)
// R rows x P panels, paired bf16 layout [K2][16][2] per panel.
template <int R, int P>
void tile_pairs(const c10::BFloat16* x, int64_t K, const c10::BFloat16* panels, int64_t panel_stride, float* acc) {
    __m512 a[R][P];
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) a[r][p] = _mm512_setzero_ps();
    const int64_t full = K / 2;
    auto step = [&](int64_t j, const int32_t* pair_of_row) {
        __m512bh w[P];
        for (int p = 0; p < P; ++p)
            w[p] = (__m512bh)_mm512_loadu_si512(panels + p * panel_stride + j * 2 * kLanes);
        for (int r = 0; r < R; ++r) {
            const __m512bh xv = (__m512bh)_mm512_set1_epi32(pair_of_row[r]);
            for (int p = 0; p < P; ++p) a[r][p] = _mm512_dpbf16_ps(a[r][p], xv, w[p]);
        }
    };
    int32_t pairs[R];
    for (int64_t j = 0; j < full; ++j) {
        for (int r = 0; r < R; ++r) std::memcpy(&pairs[r], x + r * K + 2 * j, sizeof(int32_t));
        step(j, pairs);
    }
    if (K % 2) {  // the last k alone, paired with a zero (its weight pair's second half is zero too)
        for (int r = 0; r < R; ++r) {
            const c10::BFloat16 two[2] = {x[r * K + K - 1], c10::BFloat16(0.f)};
            std::memcpy(&pairs[r], two, sizeof(int32_t));
        }
        step(full, pairs);
    }
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) _mm512_storeu_ps(acc + (r * P + p) * kLanes, a[r][p]);
}
#endif

template <typename T, int R, int P>
void tile_simd(const T* x, int64_t K, const T* panels, int64_t panel_stride, float* acc) {
#if defined(__AVX512BF16__)
    if constexpr (kPairs<T>) {
        tile_pairs<R, P>(x, K, panels, panel_stride, acc);
        return;
    }
#endif
    tile_flat<T, R, P>(x, K, panels, panel_stride, acc);
}

// Runtime (rows, panels) -> the matching instantiation.
template <typename T, int R = 1>
void tile_dispatch(int rows, int npanels, const T* x, int64_t K, const T* panels, int64_t panel_stride, float* acc) {
    if constexpr (R <= kMaxRows) {
        if (rows == R) {
            if (npanels == 2) return tile_simd<T, R, 2>(x, K, panels, panel_stride, acc);
            return tile_simd<T, R, 1>(x, K, panels, panel_stride, acc);
        }
        return tile_dispatch<T, R + 1>(rows, npanels, x, K, panels, panel_stride, acc);
    }
}
#endif

template <typename T>
void tile(int rows, int npanels, const T* x, int64_t K, const T* panels, int64_t panel_stride, float* acc) {
#if defined(__AVX512F__)
    if constexpr (tokenmill::has_vec16<T>) {
        tile_dispatch<T>(rows, npanels, x, K, panels, panel_stride, acc);
        return;
    }
#endif
    tile_portable<T>(x, K, panels, panel_stride, rows, npanels, acc);
}

template <typename T>
int64_t panel_elems(int64_t K) {
    return kPairs<T> ? (K + 1) / 2 * 2 * kLanes : K * kLanes;
}

void check_cpu(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
}

}  // namespace

torch::Tensor tokenmill::pack_invariant_weight(torch::Tensor weight) {
    check_cpu(weight, "weight");
    TORCH_CHECK(weight.dim() == 2, "weight must be [N, K]");
    TORCH_CHECK(weight.scalar_type() == torch::kFloat || weight.scalar_type() == torch::kBFloat16,
                "weight must be float32 or bfloat16");
    const int64_t N = weight.size(0), K = weight.size(1), P = (N + kLanes - 1) / kLanes;
    auto w = torch::zeros({P * kLanes, K}, weight.options());
    w.narrow(0, 0, N).copy_(weight);
    const bool pairs = weight.scalar_type() == torch::kBFloat16 && kPairs<c10::BFloat16>;
    if (!pairs) return w.view({P, kLanes, K}).permute({0, 2, 1}).contiguous();  // [P, K, 16]
    const int64_t K2 = (K + 1) / 2;
    if (K % 2) w = torch::cat({w, torch::zeros({P * kLanes, 1}, w.options())}, 1);
    return w.view({P, kLanes, K2, 2}).permute({0, 2, 1, 3}).contiguous();  // [P, K2, 16, 2]
}

torch::Tensor tokenmill::invariant_linear(torch::Tensor x, torch::Tensor packed, int64_t N,
                                          std::optional<torch::Tensor> bias) {
    check_cpu(x, "x");
    check_cpu(packed, "packed");
    TORCH_CHECK(x.dim() == 2, "x must be [M, K]");
    TORCH_CHECK(x.scalar_type() == packed.scalar_type(), "x and the packed weight must share a dtype");
    x = x.contiguous();
    const int64_t M = x.size(0), K = x.size(1), P = (N + kLanes - 1) / kLanes;
    TORCH_CHECK(packed.is_contiguous() && packed.size(0) == P, "packed weight does not match N = ", N);
    if (bias) {
        check_cpu(*bias, "bias");
        TORCH_CHECK(bias->dim() == 1 && bias->size(0) == N, "bias must be [N]");
        bias = bias->to(torch::kFloat).contiguous();
    }
    auto out = torch::empty({M, N}, x.options());
    if (M == 0 || N == 0) return out;
    const float* b = bias ? bias->data_ptr<float>() : nullptr;
    AT_DISPATCH_FLOATING_TYPES_AND(at::ScalarType::BFloat16, x.scalar_type(), "invariant_linear", [&] {
        TORCH_CHECK(packed.numel() == P * panel_elems<scalar_t>(K), "packed weight does not match K = ", K);
        const scalar_t* xp = x.data_ptr<scalar_t>();
        const scalar_t* wp = packed.data_ptr<scalar_t>();
        scalar_t* o = out.data_ptr<scalar_t>();
        const int64_t stride = panel_elems<scalar_t>(K);
        const int64_t groups = (P + kMaxPanels - 1) / kMaxPanels;
        // Threads split the panel groups; each output element is computed by one
        // tile, start to end, so the split never changes a value.
        at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
            alignas(64) float acc[kMaxRows * kMaxPanels * kLanes];
            for (int64_t g = begin; g < end; ++g) {
                const int64_t p0 = g * kMaxPanels;
                const int np = static_cast<int>(std::min<int64_t>(kMaxPanels, P - p0));
                for (int64_t m0 = 0; m0 < M; m0 += kMaxRows) {
                    const int rows = static_cast<int>(std::min<int64_t>(kMaxRows, M - m0));
                    tile<scalar_t>(rows, np, xp + m0 * K, K, wp + p0 * stride, stride, acc);
                    for (int r = 0; r < rows; ++r)
                        for (int p = 0; p < np; ++p) {
                            const int64_t n0 = (p0 + p) * kLanes;
                            const int64_t n_end = std::min<int64_t>(n0 + kLanes, N);
                            const float* a = acc + (r * np + p) * kLanes;
                            scalar_t* dst = o + (m0 + r) * N;
                            for (int64_t n = n0; n < n_end; ++n)
                                dst[n] = static_cast<scalar_t>(b ? a[n - n0] + b[n] : a[n - n0]);
                        }
                }
            }
        });
    });
    return out;
}
