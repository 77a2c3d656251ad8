// One Python module for every CPU kernel (see ops.h; docs in kernels/cpu_kernels.py).
#include "ops.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("paged_decode_attention", &tokenmill::paged_decode_attention, "paged decode attention (CPU)");
    m.def("paged_mla_attention", &tokenmill::paged_mla_attention,
          "DeepSeek latent attention over the paged latent cache, weight-absorbed form (CPU)",
          pybind11::arg("q"), pybind11::arg("cache"), pybind11::arg("block_tables"), pybind11::arg("context_lens"),
          pybind11::arg("block_size"), pybind11::arg("scale"), pybind11::arg("v_dim"));
    m.def("add_rms_norm", &tokenmill::add_rms_norm, "residual += delta, then RMSNorm (CPU)",
          pybind11::arg("residual"), pybind11::arg("delta"), pybind11::arg("weight"), pybind11::arg("eps"));
    m.def("silu_and_mul", &tokenmill::silu_and_mul, "silu(gate) * up over [T, 2I] (CPU)");
    m.def("rotary_embedding", &tokenmill::rotary_embedding, "rotary embedding in place, HF layout (CPU)");
    m.def("pack_invariant_weight", &tokenmill::pack_invariant_weight,
          "W [N, K] -> the panel layout invariant_linear reads (CPU)");
    m.def("invariant_linear", &tokenmill::invariant_linear,
          "x @ W^T + bias, each element the same sum whatever the batch (CPU)",
          pybind11::arg("x"), pybind11::arg("packed"), pybind11::arg("n"), pybind11::arg("bias"));
    m.def("int4_linear", &tokenmill::int4_linear,
          "x @ W^T + bias, W as int4 codes in groups of 32 with a scale and offset each (CPU, 1-4 rows)",
          pybind11::arg("x"), pybind11::arg("packed"), pybind11::arg("n"), pybind11::arg("bias"),
          pybind11::arg("int8_activations"));
    m.def("int4_linear_isa", &tokenmill::int4_linear_isa,
          "int4_linear's vector code on this build: avx512-vnni or avx2 (both with int8 activations), avx512 "
          "or portable");
    m.def("int8_linear", &tokenmill::int8_linear,
          "(x @ Q^T) * scales + bias, Q int8 [N, K] row-major, one scale per output (CPU)",
          pybind11::arg("x"), pybind11::arg("qweight"), pybind11::arg("scales"), pybind11::arg("bias"));
    m.def("int8_linear_isa", &tokenmill::int8_linear_isa,
          "int8_linear's vector code on this build: avx512, avx2 or portable");
    // The GIL is released for the whole step: the server's event loop runs meanwhile.
    m.def("decoder_layers", &tokenmill::decoder_layers,
          "a Llama-family model's decoder layers for one step, in one call (CPU; see decoder_layers.cpp)",
          pybind11::call_guard<pybind11::gil_scoped_release>());
    m.def("argmax_rows", &tokenmill::argmax_rows, "(first index of each row's max, how many columns hold it) (CPU)");
}
