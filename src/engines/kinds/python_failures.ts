/**
 * Failure lines the Python engines (vLLM, SGLang) share, because they come
 * from the libraries both use: PyTorch's allocator (`torch.OutOfMemoryError:
 * CUDA out of memory`, c10/cuda/CUDACachingAllocator.cpp), argparse
 * (`error: unrecognized arguments`, `error: argument --x: invalid … value`),
 * `huggingface_hub` (`RepositoryNotFoundError`, `GatedRepoError`, `401 Client
 * Error`, `404 Client Error`, src/huggingface_hub/utils/_http.py), uvicorn's
 * and Python's bind error (`[Errno 98] … address already in use`).
 *
 * @module
 */
import type { OutputRules } from "./engine_kind.ts";

/** The cause rules both Python engines start with. */
export const PYTHON_CAUSES: OutputRules["causes"] = [
  { match: /CUDA out of memory|OutOfMemoryError/, cause: "gpu-out-of-memory" },
  {
    match: /error: (unrecognized arguments|argument \S+: (invalid|expected))/,
    cause: "bad-arguments",
  },
  {
    match:
      /RepositoryNotFoundError|GatedRepoError|Repository Not Found|40[14] Client Error|is not a local folder and is not a valid model identifier|Invalid repository ID or local directory/,
    cause: "model-not-found",
  },
  {
    match: /\[Errno 98\]|[Aa]ddress already in use/,
    cause: "port-in-use",
  },
];
