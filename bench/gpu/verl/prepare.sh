#!/bin/bash
# Prepare what bench/gpu/verl/run.sh carries to the GPU machine, here (a machine with pip and
# network, in the repo's venv):
#   .gpurun/job.json, .gpurun/job-resume.json: `rlinfra render` of gpu-ppo-hf.yaml (20 steps) and
#     of the same with --env TOTAL_STEPS=24 (the resume);
#   .gpurun/job-cpu.json: the same profile without its GPU (so rlinfra renders CPU mode), 2 steps,
#     its own checkpoint folder, no merge (`run.sh cpu`);
#   .whl/bundle.tar.xz (~25 MB): the Python packages the GPU image lacks (Ray stripped, Verl 0.6.0
#     and its needs, transformers 4.56.1); skipped when it exists (BUNDLE=1 rebuilds it).
# Then: device runs, commands "bash bench/gpu/verl/run.sh gpu" and "... cpu", carry [".gpurun", ".whl/bundle.tar.xz"].
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qx '/.gpurun/' .git/info/exclude || echo /.gpurun/ >>.git/info/exclude
grep -qx '/.whl/' .git/info/exclude || echo /.whl/ >>.git/info/exclude
rm -rf .gpurun && mkdir -p .gpurun
for steps in 20 24; do
  rlinfra render -p bench/gpu/verl/gpu-ppo-hf.yaml --env TOTAL_STEPS=$steps --out .gpurun/render-$steps >/dev/null
done
PYTHONPATH=driver python3 - <<'PY'
import yaml
from rlinfra_node.verl_cpu import cpu_overrides
data = yaml.safe_load(open("bench/gpu/verl/gpu-ppo-hf.yaml"))
# CPU mode sets these itself (and refuses a profile that sets them otherwise).
for item in cpu_overrides(1):
    data["workload"]["overrides"].pop(item.split("=")[0], None)
data["resources"].pop("accelerators")
data["storage"][0]["mount_path"] = "/checkpoints-cpu"
data["workload"].pop("after")
data["env"]["TOTAL_STEPS"] = "2"
yaml.safe_dump(data, open(".gpurun/cpu-ppo-hf.yaml", "w"), sort_keys=False)
PY
rlinfra render -p .gpurun/cpu-ppo-hf.yaml --out .gpurun/render-cpu >/dev/null
cp .gpurun/render-cpu/job.json .gpurun/job-cpu.json
cp .gpurun/render-20/job.json .gpurun/job.json
cp .gpurun/render-24/job.json .gpurun/job-resume.json
rm -rf .gpurun/render-*
if [ -f .whl/bundle.tar.xz ] && [ -z "${BUNDLE:-}" ]; then ls -la .whl/bundle.tar.xz; exit 0; fi
D=.whl/dl; S=.whl/site; mkdir -p $D; rm -rf $S
P="--no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --platform any"
pip download $P -d $D ray==2.60.0 verl==0.6.0 tensordict==0.10.0 'pyvers<0.2' importlib_metadata \
  hydra-core==1.3.2 omegaconf==2.3.0 codetiming torchdata==0.11.0 datasets==4.0.0 dill==0.3.8 \
  multiprocess==0.70.16 orjson jsonschema==4.23.0 jsonschema-specifications referencing==0.36.2 \
  rpds-py pylatexenc transformers==4.56.1 tokenizers==0.22.2 huggingface_hub==0.36.2
pip wheel --no-deps -w $D antlr4-python3-runtime==4.9.3   # sdist only
pip install -q --no-deps --no-compile --target $S --python-version 3.12 --only-binary=:all: --no-index $D/*.whl
# The device has pyarrow, pandas, fsspec, xxhash, msgpack, protobuf, grpcio, aiohttp, click, ...
rm -rf $S/ray/jars $S/ray/rllib $S/ray/serve $S/ray/llm $S/ray/dashboard/client/build
strip --strip-unneeded $S/ray/core/src/ray/gcs/gcs_server $S/ray/core/src/ray/raylet/raylet
find $S -name '*.so' -exec strip --strip-unneeded {} \;
find $S -name __pycache__ -prune -exec rm -rf {} \;
XZ_OPT="-9e -T0" tar -cJf .whl/bundle.tar.xz -C $S .
ls -la .whl/bundle.tar.xz
