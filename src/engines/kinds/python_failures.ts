// Failure lines vLLM and SGLang share, from the libraries both use: PyTorch's
// allocator (c10/cuda/CUDACachingAllocator.cpp), argparse, huggingface_hub
// (src/huggingface_hub/utils/_http.py), uvicorn's and Python's bind error.
import type { OutputRules } from "./engine_kind.ts";

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
