// int4_linear's AVX2 + FMA tiles (builds without AVX-512). Included by int4_linear.cpp, inside
// its anonymous namespace, after the layout constants, Activations and prefetch_group it uses;
// int4_linear.cpp says what the layout and the two arithmetic paths are.
#pragma once

#if TOKENMILL_INT4_AVX2
// AVX2 + FMA (no AVX-512): each 16-lane panel as two 8-lane halves, h = 0 (lanes 0-7) and 1
// (lanes 8-15), one after the other within a group, so that the accumulators of one half fit
// AVX2's 16 registers. Every lane runs the AVX-512 paths' sequence of operations.

// Panel p, half h: its 8 scales and offsets of one (block, group), as scales_offsets.
template <int P>
inline void scales_offsets8(const int32_t* gb, int p, int h, __m256& scale, __m256& offset) {
    const uint16_t* sz = reinterpret_cast<const uint16_t*>(gb + kGroupWords * P * kLanes);
    const auto widen = [](const uint16_t* bits) {
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bits));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
    };
    scale = widen(sz + p * kLanes + 8 * h);
    offset = _mm256_sub_ps(widen(sz + (P + p) * kLanes + 8 * h), _mm256_mul_ps(_mm256_set1_ps(8.f), scale));
}

// Nibble t of each lane's word as a float: a shift, a mask and an int -> float conversion (AVX2's
// 8-entry permute cannot hold tile_float's 16-value table). (Widening code * 2^(4t) by the mask
// alone, against activations scaled by 2^(-4t), measured no faster.)
inline __m256 widen_nibble(__m256i w, int t) {
    return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(w, 4 * t), _mm256_set1_epi32(0xF)));
}

// Float path, one row (R = 1 at 3-4 panels; up to 2 at fewer).
template <int R, int P>
void tile_float8(const Activations& a, int64_t m0, const int32_t* blk, float* out) {
    const int64_t K = a.K, G = a.G;
    const float* x = a.x.data() + m0 * K;
    __m256 y[R][P][2];
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) y[r][p][0] = y[r][p][1] = _mm256_setzero_ps();
    for (int64_t g = 0; g < G; ++g) {
        const int32_t* gb = blk + g * P * kBlockGroupInts;
        prefetch_group<P>(gb);
        for (int h = 0; h < 2; ++h) {
            __m256 even[R][P], odd[R][P];
            for (int r = 0; r < R; ++r)
                for (int p = 0; p < P; ++p) even[r][p] = odd[r][p] = _mm256_setzero_ps();
            for (int64_t jj = 0; jj < kGroupWords; ++jj) {
                __m256i w[P];
                for (int p = 0; p < P; ++p)
                    w[p] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb + (jj * P + p) * kLanes + 8 * h));
                const int64_t k0 = g * kGroup + jj * kWordK;
#pragma GCC unroll 4
                for (int t = 0; t < 8; t += 2) {
                    __m256 c0[P], c1[P];
                    for (int p = 0; p < P; ++p) {
                        c0[p] = widen_nibble(w[p], t);
                        c1[p] = widen_nibble(w[p], t + 1);
                    }
                    for (int r = 0; r < R; ++r) {
                        const __m256 x0 = _mm256_set1_ps(x[r * K + k0 + t]), x1 = _mm256_set1_ps(x[r * K + k0 + t + 1]);
                        for (int p = 0; p < P; ++p) {
                            even[r][p] = _mm256_fmadd_ps(x0, c0[p], even[r][p]);
                            odd[r][p] = _mm256_fmadd_ps(x1, c1[p], odd[r][p]);
                        }
                    }
                }
            }
            for (int p = 0; p < P; ++p) {
                __m256 s, o;
                scales_offsets8<P>(gb, p, h, s, o);
                for (int r = 0; r < R; ++r) {
                    y[r][p][h] = _mm256_fmadd_ps(s, _mm256_add_ps(even[r][p], odd[r][p]), y[r][p][h]);
                    y[r][p][h] = _mm256_fmadd_ps(o, _mm256_set1_ps(a.xsum[(m0 + r) * G + g]), y[r][p][h]);
                }
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p)
            for (int h = 0; h < 2; ++h) _mm256_storeu_ps(out + (r * P + p) * kLanes + 8 * h, y[r][p][h]);
}

// Float path at 2-4 rows (the driver's tiles of the AVX2 float path: kAvx2FloatRows). At 3-4
// panels tile_float8 takes one row at a time (AVX2's 16 registers hold no second row's
// accumulators) and would widen the codes again for every row; here each group's codes are widened
// once into a buffer in L1 (P panels x 2 halves x 32 k x 8 lanes: 8 KB at P = 4) that every row
// reads. Each lane sees tile_float8's operations in its order, so a row gets the same bits alone
// or in a tile. out [rows][P][16] holds y between groups.
template <int P>
void tile_float8_rows(int rows, const Activations& a, int64_t m0, const int32_t* blk, float* out) {
    const int64_t K = a.K, G = a.G;
    alignas(32) float codes[P][2][kGroup][8];  // [panel][half][k within the group][lane], as widen_nibble
    std::fill(out, out + rows * P * kLanes, 0.f);
    for (int64_t g = 0; g < G; ++g) {
        const int32_t* gb = blk + g * P * kBlockGroupInts;
        prefetch_group<P>(gb);
        for (int p = 0; p < P; ++p)
            for (int h = 0; h < 2; ++h)
                for (int64_t jj = 0; jj < kGroupWords; ++jj) {
                    const __m256i w =
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb + (jj * P + p) * kLanes + 8 * h));
#pragma GCC unroll 8
                    for (int t = 0; t < 8; ++t) _mm256_store_ps(codes[p][h][jj * kWordK + t], widen_nibble(w, t));
                }
        for (int r = 0; r < rows; ++r) {
            const float* x = a.x.data() + (m0 + r) * K + g * kGroup;
            const __m256 xsum = _mm256_set1_ps(a.xsum[(m0 + r) * G + g]);
            for (int h = 0; h < 2; ++h) {
                __m256 even[P], odd[P];
                for (int p = 0; p < P; ++p) even[p] = odd[p] = _mm256_setzero_ps();
                for (int64_t k = 0; k < kGroup; k += 2) {
                    const __m256 x0 = _mm256_set1_ps(x[k]), x1 = _mm256_set1_ps(x[k + 1]);
                    for (int p = 0; p < P; ++p) {
                        even[p] = _mm256_fmadd_ps(x0, _mm256_load_ps(codes[p][h][k]), even[p]);
                        odd[p] = _mm256_fmadd_ps(x1, _mm256_load_ps(codes[p][h][k + 1]), odd[p]);
                    }
                }
                for (int p = 0; p < P; ++p) {
                    __m256 s, o;
                    scales_offsets8<P>(gb, p, h, s, o);
                    float* yp = out + (r * P + p) * kLanes + 8 * h;
                    __m256 y = _mm256_fmadd_ps(s, _mm256_add_ps(even[p], odd[p]), _mm256_loadu_ps(yp));
                    _mm256_storeu_ps(yp, _mm256_fmadd_ps(o, xsum, y));
                }
            }
        }
    }
}

// int8-activations path: tile_vnni's integer sums without vpdpbusd. vpmaddubsw multiplies the
// unsigned code bytes by the signed activation bytes and adds adjacent pairs into int16;
// those are summed over the group's four words (low and high nibbles: at most 16 products of
// |15 * 127| = 30,480 < 2^15, so nothing saturates or wraps), then vpmaddwd by ones adds each
// lane's two int16 into its int32: the group's sum per lane, exactly tile_vnni's.
template <int R, int P>
void tile_int8x8(const Activations& a, int64_t m0, const int32_t* blk, float* out) {
    const int64_t G = a.G, W = a.K / kWordK;
    const __m256i low4 = _mm256_set1_epi32(0x0F0F0F0F), ones = _mm256_set1_epi16(1);
    const int32_t* xe[R];
    const int32_t* xo[R];
    for (int r = 0; r < R; ++r) {
        xe[r] = a.even.data() + (m0 + r) * W;
        xo[r] = a.odd.data() + (m0 + r) * W;
    }
    __m256 y[R][P][2];
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) y[r][p][0] = y[r][p][1] = _mm256_setzero_ps();
    for (int64_t g = 0; g < G; ++g) {
        const int32_t* gb = blk + g * P * kBlockGroupInts;
        prefetch_group<P>(gb);
        for (int h = 0; h < 2; ++h) {
            __m256i acc[R][P];
            for (int r = 0; r < R; ++r)
                for (int p = 0; p < P; ++p) acc[r][p] = _mm256_setzero_si256();
            for (int64_t jj = 0; jj < kGroupWords; ++jj) {
                const int64_t j = g * kGroupWords + jj;
                __m256i lo[P], hi[P];
                for (int p = 0; p < P; ++p) {
                    const __m256i w =
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb + (jj * P + p) * kLanes + 8 * h));
                    lo[p] = _mm256_and_si256(w, low4);
                    hi[p] = _mm256_and_si256(_mm256_srli_epi32(w, 4), low4);
                }
                for (int r = 0; r < R; ++r) {
                    const __m256i e = _mm256_set1_epi32(xe[r][j]), o = _mm256_set1_epi32(xo[r][j]);
                    for (int p = 0; p < P; ++p)
                        acc[r][p] = _mm256_add_epi16(
                            acc[r][p], _mm256_add_epi16(_mm256_maddubs_epi16(lo[p], e), _mm256_maddubs_epi16(hi[p], o)));
                }
            }
            for (int p = 0; p < P; ++p) {
                __m256 s, o;
                scales_offsets8<P>(gb, p, h, s, o);
                for (int r = 0; r < R; ++r) {
                    const __m256 sum = _mm256_cvtepi32_ps(_mm256_madd_epi16(acc[r][p], ones));
                    const __m256 sx = _mm256_mul_ps(s, _mm256_set1_ps(a.xscale[(m0 + r) * G + g]));
                    y[r][p][h] = _mm256_fmadd_ps(sx, sum, y[r][p][h]);
                    y[r][p][h] = _mm256_fmadd_ps(o, _mm256_set1_ps(a.xsum[(m0 + r) * G + g]), y[r][p][h]);
                }
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p)
            for (int h = 0; h < 2; ++h) _mm256_storeu_ps(out + (r * P + p) * kLanes + 8 * h, y[r][p][h]);
}
#endif  // TOKENMILL_INT4_AVX2
