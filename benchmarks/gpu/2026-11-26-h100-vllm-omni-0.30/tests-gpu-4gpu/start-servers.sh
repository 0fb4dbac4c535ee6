# tests/gpu servers on GPU ${TEST_GPU:-1} of a 4-GPU host, beside the side-by-side servers: CustomVoice (8100), Base
# (8110), CustomVoice with the sentence pipeline (8120, 25 frames a sentence); each stage at 0.15 of the GPU.
set -u
W=/tmp/t2; mkdir -p $W
export CUDA_VISIBLE_DEVICES=${TEST_GPU:-1}
python3 deploy/gpu/bench_profile.py deploy/vllm-omni/customvoice.yaml $W/customvoice.yaml --memory 0.15
python3 deploy/gpu/bench_profile.py deploy/vllm-omni/voice-clone.yaml $W/voice-clone.yaml --memory 0.15
python3 deploy/gpu/bench_profile.py deploy/vllm-omni/customvoice.yaml $W/sentences.yaml --memory 0.15 --frames 25
export SPEECH_COMPILE_CACHE_DIR=$W/cache SPEECH_OMNI_FIXED_LENGTH=true CODEC_WEIGHTS=real
kvwait() { for i in $(seq 1 100); do grep -q "GPU KV cache size" $1 2>/dev/null && break; sleep 3; done; echo "$(date -u +%T) $1: $(grep -m1 -o 'GPU KV cache size.*' $1)"; }
echo "$(date -u +%T) start customvoice"
PORT=8100 LOG=$W/customvoice.log DUMMY_VARIANT=custom_voice SPEECH_DEPLOY_CONFIG=$W/customvoice.yaml deploy/gpu/start-server.sh
kvwait $W/customvoice.log
PORT=8110 LOG=$W/voice-clone.log DUMMY_VARIANT=base SPEECH_DEPLOY_CONFIG=$W/voice-clone.yaml deploy/gpu/start-server.sh
kvwait $W/voice-clone.log
SPEECH_OMNI__SENTENCE_PIPELINE=true PORT=8120 LOG=$W/sentences.log DUMMY_VARIANT=custom_voice SPEECH_DEPLOY_CONFIG=$W/sentences.yaml deploy/gpu/start-server.sh
kvwait $W/sentences.log
echo "$(date -u +%T) all launched"
