/* Register-only throughput of the AVX512-BF16 dot instruction (vdpbf16ps):
 * each thread runs 12 independent accumulator chains (enough to hide the
 * instruction's latency), no memory traffic. One instruction = 32 bf16 pairs
 * = 64 FLOP. Prints the best of 3 repetitions in GFLOP/s for OMP_NUM_THREADS
 * threads: the ceiling any bf16 GEMM on this CPU can reach without AMX. */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>

#define CHAINS 12

int main(void) {
    const long iters = 50000000;
    double best = 0.0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = omp_get_wtime();
        float sink = 0.0f;
#pragma omp parallel reduction(+ : sink)
        {
            __m512 acc[CHAINS];
            for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_setzero_ps();
            __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80);  /* bf16 1.0 */
            __m512bh b = (__m512bh)_mm512_set1_epi16(0x3f80);
            for (long it = 0; it < iters; it++) {
#pragma GCC unroll 12
                for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
            }
            for (int i = 0; i < CHAINS; i++) sink += _mm512_reduce_add_ps(acc[i]);
        }
        double seconds = omp_get_wtime() - t0;
        double flop = (double)iters * CHAINS * 64.0 * omp_get_max_threads();
        if (flop / seconds / 1e9 > best) best = flop / seconds / 1e9;
        if (sink == 0.5f) printf("unreachable\n");  /* keeps the loop alive */
    }
    printf("%d %.1f\n", omp_get_max_threads(), best);
    return 0;
}
