"""The int8 LM head of SmolLM2 (49152 x 576) at 1-128 rows: the C++ int8_linear vs torch's _weight_int8pack_mm, bf16 rows, median of 5 calls each."""
import time, torch, statistics
from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.kernels.int8_linear import quantize_per_channel
k = load_cpu_kernels(); torch.set_num_threads(2)
q, s = quantize_per_channel(torch.randn(49152, 576) * 0.05); sb = s.bfloat16()
for m in (1, 4, 32, 128):
    x = torch.randn(m, 576); xb = x.bfloat16()
    def t(f):
        f(); ts = []
        for _ in range(5):
            t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
        return statistics.median(ts) * 1e3
    print(m, "cpp bf16-in %.2f ms" % t(lambda: k.int8_linear(xb, q, sb, None)),
          "torch %.2f ms" % t(lambda: torch._weight_int8pack_mm(xb, q, sb)))
