# The two servers tests/gpu ran against: the shipped CustomVoice and voice-clone profiles (memory shares cut so both fit)
set -u
W=/tmp/t2; mkdir -p $W
python3 deploy/gpu/bench_profile.py deploy/vllm-omni/customvoice.yaml $W/customvoice.yaml --memory 0.22
python3 deploy/gpu/bench_profile.py deploy/vllm-omni/voice-clone.yaml $W/voice-clone.yaml --memory 0.2
export SPEECH_COMPILE_CACHE_DIR=$W/cache SPEECH_OMNI_FIXED_LENGTH=true CODEC_WEIGHTS=real
PORT=8000 LOG=$W/customvoice.log DUMMY_VARIANT=custom_voice SPEECH_DEPLOY_CONFIG=$W/customvoice.yaml deploy/gpu/start-server.sh
for i in $(seq 1 100); do grep -q "GPU KV cache size" $W/customvoice.log 2>/dev/null && break; sleep 3; done
grep -m1 -o "GPU KV cache size.*" $W/customvoice.log
PORT=8010 LOG=$W/voice-clone.log DUMMY_VARIANT=base SPEECH_DEPLOY_CONFIG=$W/voice-clone.yaml deploy/gpu/start-server.sh
