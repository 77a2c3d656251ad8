// int8 weight-only linear on CPU: y [M, N] = (x [M, K] @ Q^T) * scale[n] + bias[n], Q the int8
// weights [N, K] as quantize_per_channel stores them (kernels/int8_linear.py; symmetric, one
// scale per output channel). The LM head of --quantization int4 and every linear of int8.
//
// Why: torch's _weight_int8pack_mm measured 3.5 ms for SmolLM2's 49152 x 576 LM head at one row
// on an AVX-512 Xeon, about 8 GB/s, where the bf16 panel kernel streams twice those bytes in
// 3.0 ms (docs/PERFORMANCE.md). Here each output is a dot product over its weight row, read in
// place (no second layout in memory): the rows of a tile are adjacent in Q, so a thread reads
// one sequential stream; 16 int8 weights are widened to float32 in registers (vpmovsxbd +
// vcvtdq2ps) and multiplied by 16 float32 activations, shared by up to kMaxRows input rows.
// Measured against torch's kernel on that head, weights from memory: python -m benchmarks.int8_head,
// docs/PERFORMANCE.md (thirteenth session).
//
// Order of operations, fixed whatever M is and however the threads split the rows: lane j of
// output (r, n) accumulates x[r, k] * q[n, k] for k = j, j + 16, .. ascending (one FMA each);
// the 16 lanes are then summed by _mm512_reduce_add_ps, and the sum times scale[n] (plus bias)
// is rounded to x's dtype. So the kernel is batch-invariant, like invariant_linear. AVX2 builds
// keep the 16 lanes (as two 8-lane halves) and that summation order.
#include "ops.h"

#include <ATen/Parallel.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <string>
#include <vector>

namespace {

constexpr int64_t kLanes = 16;
constexpr int kRowsPerTile = 4;   // weight rows (outputs) per tile
// Input rows per tile: kMaxRows x kRowsPerTile accumulators, in AVX-512's 32 registers, or (one
// 8-lane half at a time) in AVX2's 16.
#if defined(__AVX512F__)
constexpr int kMaxRows = 6;
#else
constexpr int kMaxRows = 2;
#endif
// Software prefetch distance in the tile's stream (an ad hoc A/B on an AVX-512 Xeon, SmolLM2's LM head at one
// row, weights from memory: 4, 8 and 16 KB within 2% of each other).
constexpr int64_t kPrefetchBytes = 8192;

#if defined(__AVX512F__)

// R input rows x W weight rows (outputs n0 .. n0 + W - 1), K a multiple of 16.
template <int R, int W>
void tile(const float* x, int64_t K, const int8_t* q, int64_t n0, float* acc /* [R][W] */) {
    __m512 sum[R][W];
    for (int r = 0; r < R; ++r)
        for (int w = 0; w < W; ++w) sum[r][w] = _mm512_setzero_ps();
    const int8_t* rows = q + n0 * K;
    for (int64_t k = 0; k < K; k += kLanes) {
        // The tile's W rows are W * K contiguous bytes, consumed W * 16 per step: one line ahead per step
        // covers the whole stream (prefetching along row 0 alone covered a W-th of it: 1.6x slower).
        _mm_prefetch(reinterpret_cast<const char*>(rows + k * W + kPrefetchBytes), _MM_HINT_T0);
        __m512 wv[W];
        for (int w = 0; w < W; ++w)
            wv[w] = _mm512_cvtepi32_ps(
                _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows + w * K + k))));
        for (int r = 0; r < R; ++r) {
            const __m512 xv = _mm512_loadu_ps(x + r * K + k);
            for (int w = 0; w < W; ++w) sum[r][w] = _mm512_fmadd_ps(xv, wv[w], sum[r][w]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int w = 0; w < W; ++w) acc[r * W + w] = _mm512_reduce_add_ps(sum[r][w]);
}

template <int W>
void tile_rows(int rows, const float* x, int64_t K, const int8_t* q, int64_t n0, float* acc) {
    switch (rows) {
        case 1: return tile<1, W>(x, K, q, n0, acc);
        case 2: return tile<2, W>(x, K, q, n0, acc);
        case 3: return tile<3, W>(x, K, q, n0, acc);
        case 4: return tile<4, W>(x, K, q, n0, acc);
        case 5: return tile<5, W>(x, K, q, n0, acc);
        default: return tile<6, W>(x, K, q, n0, acc);
    }
}

#elif defined(__AVX2__) && defined(__FMA__)

// AVX2 + FMA: the same 16 lanes per output, computed as two 8-lane halves one after the other
// (h = 0: k = 16 i + 0..7, lanes 0-7; h = 1: k = 16 i + 8..15), so that R x W accumulators fit 16
// registers; the second pass reads the tile's rows from cache. The 16 lanes are then summed in
// _mm512_reduce_add_ps's order (GCC's: upper half + lower half, then 128-bit halves, then pairs).
inline float reduce16(__m256 lanes_lo, __m256 lanes_hi) {
    const __m256 t3 = _mm256_add_ps(lanes_hi, lanes_lo);
    const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
    const __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(t8) + _mm_cvtss_f32(_mm_shuffle_ps(t8, t8, _MM_SHUFFLE(1, 1, 1, 1)));
}

template <int R, int W>
void tile(const float* x, int64_t K, const int8_t* q, int64_t n0, float* acc) {
    const int8_t* rows = q + n0 * K;
    __m256 half[2][R][W];
    for (int h = 0; h < 2; ++h) {
        __m256 sum[R][W];
        for (int r = 0; r < R; ++r)
            for (int w = 0; w < W; ++w) sum[r][w] = _mm256_setzero_ps();
        for (int64_t k = 8 * h; k < K; k += kLanes) {
            if (h == 0) _mm_prefetch(reinterpret_cast<const char*>(rows + k * W + kPrefetchBytes), _MM_HINT_T0);
            __m256 xv[R];
            for (int r = 0; r < R; ++r) xv[r] = _mm256_loadu_ps(x + r * K + k);
            for (int w = 0; w < W; ++w) {
                const __m256 wv = _mm256_cvtepi32_ps(
                    _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(rows + w * K + k))));
                for (int r = 0; r < R; ++r) sum[r][w] = _mm256_fmadd_ps(xv[r], wv, sum[r][w]);
            }
        }
        for (int r = 0; r < R; ++r)
            for (int w = 0; w < W; ++w) half[h][r][w] = sum[r][w];
    }
    for (int r = 0; r < R; ++r)
        for (int w = 0; w < W; ++w) acc[r * W + w] = reduce16(half[0][r][w], half[1][r][w]);
}

template <int W>
void tile_rows(int rows, const float* x, int64_t K, const int8_t* q, int64_t n0, float* acc) {
    if (rows == 1) return tile<1, W>(x, K, q, n0, acc);
    return tile<2, W>(x, K, q, n0, acc);
}

#endif

// Builds without AVX-512 or AVX2 (Python uses torch's kernel there; tests reach this only through
// int8_linear_isa() == "portable"): the same lane-wise order in scalar code.
void tile_portable(int rows, int width, const float* x, int64_t K, const int8_t* q, int64_t n0, float* acc) {
    for (int r = 0; r < rows; ++r)
        for (int w = 0; w < width; ++w) {
            float lane[kLanes] = {};
            const int8_t* row = q + (n0 + w) * K;
            for (int64_t k = 0; k < K; ++k) lane[k % kLanes] += x[r * K + k] * static_cast<float>(row[k]);
            float s = 0.f;
            for (float v : lane) s += v;
            acc[r * width + w] = s;
        }
}

void run_tile(int rows, int width, const float* x, int64_t K, const int8_t* q, int64_t n0, float* acc) {
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
    switch (width) {
        case 4: return tile_rows<4>(rows, x, K, q, n0, acc);
        case 3: return tile_rows<3>(rows, x, K, q, n0, acc);
        case 2: return tile_rows<2>(rows, x, K, q, n0, acc);
        default: return tile_rows<1>(rows, x, K, q, n0, acc);
    }
#else
    tile_portable(rows, width, x, K, q, n0, acc);
#endif
}

template <typename T>
std::vector<float> widen(const T* x, int64_t n) {
    std::vector<float> out(n);
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(x[i]);
    return out;
}

template <typename T>
void store(const float* acc, int rows, int width, int64_t n0, int64_t N, const float* scale, const float* bias,
           T* y_rows /* y + m0 * N */) {
    for (int r = 0; r < rows; ++r)
        for (int w = 0; w < width; ++w) {
            const int64_t n = n0 + w;
            const float v = acc[r * width + w] * scale[n];
            y_rows[r * N + n] = static_cast<T>(bias ? v + bias[n] : v);
        }
}

}  // namespace

namespace tokenmill {

std::string int8_linear_isa() {
#if defined(__AVX512F__)
    return "avx512";
#elif defined(__AVX2__) && defined(__FMA__)
    return "avx2";
#else
    return "portable";
#endif
}

torch::Tensor int8_linear(torch::Tensor x, torch::Tensor qweight, torch::Tensor scales,
                          std::optional<torch::Tensor> bias) {
    TORCH_CHECK(x.dim() == 2 && x.is_contiguous(), "int8_linear: x must be contiguous [M, K]");
    TORCH_CHECK(x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kBFloat16,
                "int8_linear: x must be float32 or bfloat16");
    TORCH_CHECK(qweight.scalar_type() == torch::kChar && qweight.dim() == 2 && qweight.is_contiguous(),
                "int8_linear: qweight must be contiguous int8 [N, K]");
    const int64_t M = x.size(0), K = x.size(1), N = qweight.size(0);
    TORCH_CHECK(qweight.size(1) == K && K % kLanes == 0, "int8_linear: qweight [", N, ", ", qweight.size(1),
                "] against x [", M, ", ", K, "]: K must match and be a multiple of 16");
    TORCH_CHECK(scales.numel() == N, "int8_linear: scales must have N = ", N, " elements");
    const torch::Tensor scale_f = scales.to(torch::kFloat).contiguous();
    torch::Tensor bias_f;
    const float* b = nullptr;
    if (bias.has_value() && bias->defined()) {
        TORCH_CHECK(bias->numel() == N, "int8_linear: bias must have N elements");
        bias_f = bias->to(torch::kFloat).contiguous();
        b = bias_f.data_ptr<float>();
    }
    const std::vector<float> xf = x.scalar_type() == torch::kFloat ? widen(x.data_ptr<float>(), M * K)
                                                                    : widen(x.data_ptr<c10::BFloat16>(), M * K);
    auto y = torch::empty({M, N}, x.options());
    const bool out_float = y.scalar_type() == torch::kFloat;
    float* y_f = out_float ? y.data_ptr<float>() : nullptr;  // taken once, not per tile
    c10::BFloat16* y_b = out_float ? nullptr : y.data_ptr<c10::BFloat16>();
    const int8_t* q = qweight.data_ptr<int8_t>();
    const float* s = scale_f.data_ptr<float>();
    const int64_t tiles = (N + kRowsPerTile - 1) / kRowsPerTile;
    // Grain: 16 tiles (64 weight rows) per task, so that small layers are not split to nothing.
    at::parallel_for(0, tiles, 16, [&](int64_t begin, int64_t end) {
        float acc[kMaxRows * kRowsPerTile];
        for (int64_t t = begin; t < end; ++t) {
            const int64_t n0 = t * kRowsPerTile;
            const int width = static_cast<int>(std::min<int64_t>(kRowsPerTile, N - n0));
            for (int64_t m0 = 0; m0 < M; m0 += kMaxRows) {
                const int rows = static_cast<int>(std::min<int64_t>(kMaxRows, M - m0));
                run_tile(rows, width, xf.data() + m0 * K, K, q, n0, acc);
                if (out_float)
                    store(acc, rows, width, n0, N, s, b, y_f + m0 * N);
                else
                    store(acc, rows, width, n0, N, s, b, y_b + m0 * N);
            }
        }
    });
    return y;
}

}  // namespace tokenmill
