# The three servers tests/gpu ran against: the shipped CustomVoice (port 8000) and voice-clone (8010) profiles, and
# CustomVoice with the sentence pipeline on (8020, 25 frames a sentence); each stage at 0.15 of the GPU so that all
# three fit. Started detached, one after another once the previous talker logged its KV cache size.
set -u
W=/tmp/t2; mkdir -p $W
python3 deploy/gpu/bench_profile.py deploy/vllm-omni/customvoice.yaml $W/customvoice.yaml --memory 0.15
python3 deploy/gpu/bench_profile.py deploy/vllm-omni/voice-clone.yaml $W/voice-clone.yaml --memory 0.15
python3 deploy/gpu/bench_profile.py deploy/vllm-omni/customvoice.yaml $W/sentences.yaml --memory 0.15 --frames 25
export SPEECH_COMPILE_CACHE_DIR=$W/cache SPEECH_OMNI_FIXED_LENGTH=true CODEC_WEIGHTS=real
kvwait() { for i in $(seq 1 100); do grep -q "GPU KV cache size" $1 2>/dev/null && break; sleep 3; done; }
PORT=8000 LOG=$W/customvoice.log DUMMY_VARIANT=custom_voice SPEECH_DEPLOY_CONFIG=$W/customvoice.yaml deploy/gpu/start-server.sh
kvwait $W/customvoice.log
PORT=8010 LOG=$W/voice-clone.log DUMMY_VARIANT=base SPEECH_DEPLOY_CONFIG=$W/voice-clone.yaml deploy/gpu/start-server.sh
kvwait $W/voice-clone.log
SPEECH_OMNI__SENTENCE_PIPELINE=true PORT=8020 LOG=$W/sentences.log DUMMY_VARIANT=custom_voice \
  SPEECH_DEPLOY_CONFIG=$W/sentences.yaml deploy/gpu/start-server.sh
# then, once all three answer /ready:
#   SPEECH_GPU_URL=http://127.0.0.1:8000 SPEECH_GPU_CLONE_URL=http://127.0.0.1:8010 \
#     SPEECH_GPU_SERVER_LOG=/tmp/t2/customvoice.log python3 -m pytest -q -rs tests/gpu --junitxml=junit.xml
#   SPEECH_GPU_URL=http://127.0.0.1:8020 SPEECH_GPU_SERVER_LOG=/tmp/t2/sentences.log SPEECH_GPU_SENTENCE_TOKENS=26 \
#     python3 -m pytest -q -rs tests/gpu -k "sentence_pipeline_speaks_every_sentence or each_sentence_is_timed" \
#     --junitxml=junit-sentences.xml
