/* Register-only throughput of float32 fused multiply-add: each thread runs 12
 * independent accumulator chains (enough to hide the instruction's latency on
 * two FMA pipes), no memory traffic. Vectors of 16 lanes with AVX-512, else 8
 * with AVX2 + FMA; one instruction = 2 FLOP per lane. Prints the thread count
 * and the best of 3 repetitions in GFLOP/s: the ceiling any float32 GEMM on
 * this CPU can reach. Build with -O2 or higher (at -O0 the chains live in memory). */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>

#define CHAINS 12

#if defined(__AVX512F__)
typedef __m512 vec;
#define LANES 16
#define SET1 _mm512_set1_ps
#define FMA _mm512_fmadd_ps
static float first_lane(vec v) { return _mm512_cvtss_f32(v); }
#elif defined(__AVX2__) && defined(__FMA__)
typedef __m256 vec;
#define LANES 8
#define SET1 _mm256_set1_ps
#define FMA _mm256_fmadd_ps
static float first_lane(vec v) { return _mm256_cvtss_f32(v); }
#else
#error "needs AVX2 + FMA or AVX-512"
#endif

int main(void) {
    const long iters = 100000000;
    double best = 0.0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = omp_get_wtime();
        float sink = 0.0f;
#pragma omp parallel reduction(+ : sink)
        {
            vec acc[CHAINS];
            for (int i = 0; i < CHAINS; i++) acc[i] = SET1((float)i);
            const vec a = SET1(0.999999f), b = SET1(1e-7f);
            for (long it = 0; it < iters; it++) {
#pragma GCC unroll 12
                for (int i = 0; i < CHAINS; i++) acc[i] = FMA(acc[i], a, b);
            }
            for (int i = 0; i < CHAINS; i++) sink += first_lane(acc[i]);
        }
        double seconds = omp_get_wtime() - t0;
        double flop = (double)iters * CHAINS * 2.0 * LANES * omp_get_max_threads();
        if (flop / seconds / 1e9 > best) best = flop / seconds / 1e9;
        if (sink == 0.5f) printf("unreachable\n");  /* keeps the loop alive */
    }
    printf("%d %.1f\n", omp_get_max_threads(), best);
    return 0;
}
