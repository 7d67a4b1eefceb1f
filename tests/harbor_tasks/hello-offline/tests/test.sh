#!/bin/bash
# Offline verifier: python3 from the image, no downloads. Two dimensions in reward.json, the score in "reward".
mkdir -p /logs/verifier
python3 /tests/check_greetings.py /app > /logs/verifier/reward.json
cat /logs/verifier/reward.json
