"""Excerpts of real Kaggle notebooks (unslothai/notebooks, nb/Kaggle-*.ipynb at bdda2efc, LGPL-3.0), cut to the
cells and lines the install checks read, with hand labels: every finding the lint must report on Kaggle, as
(check, cell, line), and why it is true. The excerpts keep each form of branch and install line those notebooks use.

    name -> (source notebook, cells, {(check, cell, 1-based line): why})
"""

from __future__ import annotations

STANDARD = """%%capture
import os

!pip install pip3-autoremove
!pip install torch torchvision torchaudio xformers --index-url https://download.pytorch.org/whl/cu128
!pip install unsloth
!pip install --no-deps --upgrade "torchao>=0.16.0"
!pip install transformers==4.56.2
!pip install --no-deps trl==0.22.2
!pip install librosa soundfile evaluate jiwer torchcodec "datasets>=3.4.1,<4.0.0\""""

FIND_SPEC = """%%capture
import os, importlib.util
!pip install --upgrade -qqq uv
if importlib.util.find_spec("torch") is None or "COLAB_" in "".join(os.environ.keys()):
    try: import numpy, PIL; _numpy = f"numpy=={numpy.__version__}"; _pil = f"pillow=={PIL.__version__}"
    except: _numpy = "numpy"; _pil = "pillow"
    !uv pip install -qqq \\
        "torch>=2.8.0" "triton>=3.4.0" {_numpy} {_pil} torchvision bitsandbytes "transformers==4.56.2" \\
        "unsloth_zoo[base] @ git+https://github.com/unslothai/unsloth-zoo" \\
        "unsloth[base] @ git+https://github.com/unslothai/unsloth"
elif importlib.util.find_spec("unsloth") is None:
    !uv pip install -qqq unsloth
!uv pip install --upgrade --no-deps transformers==4.56.2 "tokenizers>=0.22.0,<=0.23.0" trl==0.22.2 unsloth unsloth_zoo
!uv pip install --no-deps --upgrade "torchao>=0.16.0\""""

COLAB_ELSE = """%%capture
import os, re
if "COLAB_" not in "".join(os.environ.keys()):
    !pip install unsloth  # Do this in local & cloud setups
else:
    import torch; v = re.match(r'[\\d]{1,}\\.[\\d]{1,}', str(torch.__version__)).group(0)
    xformers = 'xformers==' + {'2.10':'0.0.34','2.9':'0.0.33.post1','2.8':'0.0.32.post2'}.get(v, "0.0.34")
    !pip install sentencepiece protobuf "datasets==4.3.0" "huggingface_hub>=0.34.0" hf_transfer
    !pip install --no-deps unsloth_zoo bitsandbytes accelerate {xformers} peft trl triton unsloth
    !pip install --no-deps --upgrade "torchao>=0.16.0"
!pip install --no-deps transformers==5.10.1 "tokenizers>=0.22.0,<=0.23.0"
!pip install "huggingface_hub>=1.5.0,<2.0"
!pip install torchcodec
import torch; torch._dynamo.config.recompile_limit = 64;"""

TIMM = "%%capture\n!pip install --no-deps --upgrade timm # For Gemma 4 vision/audio"

VARIABLES = """%%capture
!pip install --upgrade -qqq uv
try: import numpy, PIL; _numpy = f'numpy=={numpy.__version__}'; _pil = f'pillow=={PIL.__version__}'
except: _numpy = "numpy"; _pil = "pillow"
try: import subprocess; is_t4 = "Tesla T4" in str(subprocess.check_output(["nvidia-smi"]))
except: is_t4 = False
_vllm, _triton = ('vllm==0.11.2', 'triton') if is_t4 else ('vllm==0.15.1', 'triton')
!uv pip install -qqq --upgrade {_vllm} {_numpy} {_pil} torchvision bitsandbytes xformers unsloth
!uv pip install -qqq {_triton} "huggingface_hub>=0.34.0" "datasets==4.3.0\""""

UNDECIDED = """%%capture
import os, importlib.util, subprocess
try: _cc = int(subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], \
                   capture_output=True, text=True).stdout.split()[0].split(".")[0])
except: _cc = 0
if _cc >= 10:
    try: import torch as _t; _torch = f"torch=={_t.__version__.split('+')[0]}"
    except: _torch = "torch"
    _mamba, _conv = "mamba_ssm==2.3.2.post1", "causal_conv1d==1.6.2.post1"
else:
    _torch, _mamba, _conv = "torch==2.7.1", "mamba_ssm==2.2.5", "causal_conv1d==1.5.2"
!uv pip install --no-build-isolation {_mamba} {_conv}"""

EXCERPTS = {
    # 52 of the 112 Kaggle notebooks start with this cell (here: Kaggle-Whisper.ipynb, cell 4).
    "standard": ("Kaggle-Whisper.ipynb", [STANDARD], {
        ("hidden-install-output", 0, 1): "%%capture over the installs",
        ("unpinned-install", 0, 5): "xformers from the cu128 index resolves torch again: the image's torch can go",
        ("unpinned-install", 0, 7): "--upgrade torchao>=0.16.0: Kaggle's 0.10.0 is replaced by the newest",
        ("unpinned-install", 0, 10): "datasets<4 replaces Kaggle's 4.8.5 (librosa, soundfile, torchcodec stay: "
                                     "nothing on the line requires other versions)",
    }),
    # find_spec / COLAB_ branch: runs on Kaggle (its image sets COLAB_RELEASE_TAG); the elif cannot.
    "find_spec": ("Kaggle-GPT_OSS_BNB_(20B)-Inference.ipynb", [FIND_SPEC], {
        ("hidden-install-output", 0, 1): "%%capture over the installs",
        ("unpinned-install", 0, 8): "torch>=2.8.0, triton>=3.4.0, torchvision beside unsloth[base]: torch can go",
        ("unpinned-install", 0, 13): "--upgrade tokenizers to the newest <=0.23.0 over Kaggle's 0.22.2",
        ("unpinned-install", 0, 14): "--upgrade torchao>=0.16.0 over Kaggle's 0.10.0",
    }),
    # `if "COLAB_" not in ...: ... else:` the else runs on Kaggle; the timm cell follows it. Lines 8, 11 and 12 move
    # nothing there: datasets 4.3.0 requires huggingface-hub>=0.25.0,<2.0 (its wheel's METADATA), so Kaggle's 1.10.1
    # stays, nothing on line 8 requires sentencepiece, protobuf or tokenizers, and 0.22.2 and 1.10.1 fit 11 and 12.
    "colab_else": ("Kaggle-Gemma4_(12B)_Text.ipynb", [COLAB_ELSE, TIMM], {
        ("hidden-install-output", 0, 1): "%%capture over the installs",
        ("unpinned-install", 0, 10): "--upgrade torchao>=0.16.0 over Kaggle's 0.10.0",
        ("hidden-install-output", 1, 1): "%%capture over the install",
        ("unpinned-install", 1, 2): "--upgrade timm over Kaggle's 1.0.26",
    }),
    # Variables: {_triton} is 'triton' whatever is_t4 is; {_vllm} has two values and {_numpy} none known.
    "variables": ("Kaggle-Qwen3_(4B)-GRPO.ipynb", [VARIABLES], {
        ("hidden-install-output", 0, 1): "%%capture over the installs",
        ("unpinned-install", 0, 8): "uv --upgrade torchvision: a newer torchvision brings a newer torch; uv's "
                                    "--upgrade is eager: everything under vllm and unsloth moves",
        ("unpinned-install", 0, 9): "huggingface_hub>=0.34.0 finds what line 8's eager upgrade left (triton stays: "
                                    "nothing on the line needs another torch)",
    }),
    # A condition no fact decides (the GPU's compute capability) sets the versions: both are pinned, no finding.
    "undecided": ("Kaggle-Granite4.0_350M.ipynb", [UNDECIDED], {
        ("hidden-install-output", 0, 1): "%%capture over the install",
    }),
    # A package the image has, named bare: pip installs nothing, so the import above it is not made stale
    # (cell 4's imports cut to one line).
    "kept": ("Kaggle-DeepSeek_R1_0528_Qwen3_(8B)_GRPO.ipynb", ["import numpy", "!pip install langid -qq"], {}),
    # Shell `||` around apt-get: no pip install at all.
    "shell_or": ("Kaggle-Llama3_(8B)-Ollama.ipynb", [
        "!command -v zstd >/dev/null 2>&1 || (apt-get -qq update && apt-get -qq install -y zstd) >/dev/null 2>&1\n"
        "!curl -fsSL https://ollama.com/install.sh | sh"], {}),
}
