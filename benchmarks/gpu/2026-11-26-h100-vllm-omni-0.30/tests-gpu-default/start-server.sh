# The server tests/gpu ran against after customvoice.yaml took the decoder settings measured in ../alone: the shipped
# CustomVoice profile as it is (each stage at 0.3 of the GPU, alone on it), codec weights in the checkpoint's format.
# Base (voice-clone.yaml, unchanged since ../tests-gpu-final) was not started again.
set -u
W=/tmp/t2; mkdir -p $W
export SPEECH_COMPILE_CACHE_DIR=$W/cache SPEECH_OMNI_FIXED_LENGTH=true CODEC_WEIGHTS=real
PORT=8000 LOG=$W/customvoice.log DUMMY_VARIANT=custom_voice SPEECH_DEPLOY_CONFIG=deploy/vllm-omni/customvoice.yaml \
  deploy/gpu/start-server.sh
# then, once GET /ready answers 200:
#   SPEECH_GPU_URL=http://127.0.0.1:8000 SPEECH_GPU_SERVER_LOG=$W/customvoice.log python3 -m pytest -q -rs tests/gpu
