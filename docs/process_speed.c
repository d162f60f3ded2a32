// One process's prompt speed through llama.cpp, with localspec's context settings
// (docs/measured.md, "Long prompts against llama-server": run it a few times, and each run is
// a new process with its own memory placement). Built against the libllama that
// llama-cpp-python installed, from the headers of the source it vendors:
//
//   LIB=$(python -c 'import llama_cpp, os; print(os.path.dirname(llama_cpp.__file__))')/lib
//   SRC=llama_cpp_python-0.3.36/vendor/llama.cpp   # `pip download --no-binary :all: ...`
//   cc -O2 -o process_speed docs/process_speed.c -I$SRC/include -I$SRC/ggml/include -L$LIB -lllama -Wl,-rpath,$LIB
//   for i in 1 2 3 4; do ./process_speed TARGET.gguf 2048 512 3 32768 3 2>/dev/null; done
//
// Arguments: model, prompt tokens, tokens per llama_decode call, sequences, context, prompts.
// A warm-up call first; then each prompt of random tokens on an emptied cache, timed.
#include "llama.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char ** argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s MODEL TOKENS CALL SEQUENCES [CONTEXT [PROMPTS]]\n", argv[0]);
        return 2;
    }
    const char * path = argv[1]; int N = atoi(argv[2]); int call = atoi(argv[3]); int nseq = atoi(argv[4]);
    int n_ctx = argc > 5 ? atoi(argv[5]) : 32768; int reps = argc > 6 ? atoi(argv[6]) : 1;
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params(); mp.load_mode = LLAMA_LOAD_MODE_NONE;
    struct llama_model * model = llama_model_load_from_file(path, mp);
    if (!model) { fprintf(stderr, "cannot load %s\n", path); return 1; }
    struct llama_context_params p = llama_context_default_params();
    p.n_ctx = n_ctx; p.n_batch = call; p.n_ubatch = call < 512 ? call : 512; p.n_seq_max = nseq; p.kv_unified = 1;
    p.n_threads = 2; p.n_threads_batch = 2; p.no_perf = 1; p.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    struct llama_context * ctx = llama_init_from_model(model, p);
    llama_batch b = llama_batch_init(call, 0, 1);
    srand(1);
    for (int r = 0; r < reps + 1; r++) {   // the first is a warm-up of one call
        llama_memory_clear(llama_get_memory(ctx), 1);
        int n = r == 0 ? call : N; double t0 = now();
        for (int done = 0; done < n; done += call) {
            int k = n - done < call ? n - done : call;
            for (int i = 0; i < k; i++) { b.token[i] = 1000 + rand() % 99000; b.pos[i] = done + i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0; b.logits[i] = done + i == n - 1; }
            b.n_tokens = k;
            if (llama_decode(ctx, b)) { fprintf(stderr, "decode failed\n"); return 1; }
        }
        llama_synchronize(ctx);
        if (r) printf("C N=%d call=%d nseq=%d ctx=%d: %.2f tok/s\n", N, call, nseq, n_ctx, N / (now() - t0));
    }
    return 0;
}
