// What vLLM and SGLang share, from the Python libraries both use.
import type { OutputRules } from "./engine_kind.ts";
import { helpFlags } from "./engine_kind.ts";

// An argparse help (CPython's `Lib/argparse.py`,
// `HelpFormatter._format_action_invocation`): option lines indented by two
// spaces, flags comma-separated each with its metavar, help after two spaces
// or on later lines indented by 24 or more.
export function argparseFlags(text: string): string[] {
  return helpFlags(
    text,
    (line) => line.match(/^ {2,8}(-\S.*?)(?: {2,}|$)/)?.[1],
    ", ",
  );
}

// The shards' tqdm of the weight loaders (vllm/model_executor/model_loader/
// weight_utils.py, python/sglang/srt/model_loader/weight_utils.py).
export const SHARDS: OutputRules["phases"][number] = {
  match: /Loading safetensors checkpoint shards:.*?(\d+)\/(\d+)/,
  phase: "loading",
};

// PyTorch's allocator (c10/cuda/CUDACachingAllocator.cpp), argparse,
// huggingface_hub (src/huggingface_hub/utils/_http.py), uvicorn's and
// Python's bind error.
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
  { match: /\[Errno 98\]|[Aa]ddress already in use/, cause: "port-in-use" },
];
