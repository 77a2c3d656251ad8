// Shared helpers for the CPU kernels: 16-lane (AVX-512) and 8-lane (AVX2) float32
// loads that widen bfloat16 on the way in and stores that round it (to nearest
// even) on the way out, horizontal sums, and vectorised exps. Compute is float32
// whatever the storage dtype.
#pragma once

#include <c10/util/BFloat16.h>

#include <cstdint>
#include <limits>
#include <type_traits>

namespace tokenmill {

// Storage dtypes with 16-lane load16/store16 below (other dtypes take scalar loops).
template <typename T>
constexpr bool has_vec16 = std::is_same_v<T, float> || std::is_same_v<T, c10::BFloat16>;

}  // namespace tokenmill

#if defined(__AVX512F__)
#include <immintrin.h>

namespace tokenmill {

inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const c10::BFloat16* p) {  // bf16 -> fp32 is a 16-bit left shift
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

inline void store16(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
inline void store16(c10::BFloat16* p, __m512 v) {
#if defined(__AVX512BF16__)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), (__m256i)_mm512_cvtneps_pbh(v));
#else
    // Round to nearest even on the upper 16 bits; NaNs stay quiet NaNs.
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    rounded = _mm512_mask_mov_epi32(rounded, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(0x7fc0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(rounded));
#endif
}

// e^x for x in [-87, 88]: 2^n * 2^f, n = round(x log2 e), |f| <= 1/2, 2^f by its
// degree-6 Taylor series (relative error ~1e-7). Below -87 it returns ~e^-87
// (not 0), which callers treat as 0 next to their other terms; above 88, +inf.
inline __m512 exp16(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.f));
    const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(t, n);
    __m512 p = _mm512_set1_ps(1.540353039e-4f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.333355815e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618129108e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550410866e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402265070e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931471806e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
    return _mm512_scalef_ps(p, n);
}

inline __mmask16 tail_mask(int64_t n) { return n >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << n) - 1); }

// The largest of s[0, n), n >= 1.
inline float max16(const float* s, int64_t n) {
    __m512 mx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t j = 0; j < n; j += 16)
        mx = _mm512_mask_max_ps(mx, tail_mask(n - j), mx, _mm512_maskz_loadu_ps(tail_mask(n - j), s + j));
    return _mm512_reduce_max_ps(mx);
}

// s[j] <- e^(s[j] - m) for j < n (m >= every s[j]: a softmax's shift); returns their sum.
inline float exp_shifted_sum16(float* s, int64_t n, float m) {
    const __m512 mv = _mm512_set1_ps(m);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 k = tail_mask(n - j);
        const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), mv));
        _mm512_mask_storeu_ps(s + j, k, e);
        sum = _mm512_mask_add_ps(sum, k, sum, e);
    }
    return _mm512_reduce_add_ps(sum);
}

}  // namespace tokenmill
#endif

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

namespace tokenmill {

// Storage dtypes with the 8-lane load8/store8 below.
template <typename T>
constexpr bool has_vec8 = has_vec16<T>;

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const c10::BFloat16* p) {  // bf16 -> fp32 is a 16-bit left shift
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}

inline void store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
inline void store8(c10::BFloat16* p, __m256 v) {  // round to nearest even as store16; NaNs stay quiet NaNs
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    rounded = _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7fc0), _mm256_castps_si256(nan));
    // 8 x 32-bit -> 8 x 16-bit: the values fit in 16 bits, so unsigned saturation keeps them.
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(rounded), _mm256_extracti128_si256(rounded, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
}

inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

inline float hmax8(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

// e^x by exp16's method: 2^n * 2^f, with 2^n built from its exponent bits (AVX2 has
// no scalef). x is clamped to [-87, 88] so that n + 127 stays in 1..254: below -87 it
// returns ~e^-87 as exp16 does, above 88 it returns e^88 (finite; exp16 gives +inf).
inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.f)), _mm256_set1_ps(88.f));
    const __m256 t = _mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f));
    const __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(t, n);
    __m256 p = _mm256_set1_ps(1.540353039e-4f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.333355815e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618129108e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550410866e-2f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402265070e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931471806e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

}  // namespace tokenmill
#endif
