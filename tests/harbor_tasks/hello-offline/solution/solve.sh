#!/bin/bash
while IFS= read -r n; do [ -n "$n" ] && echo "Hello, $n!"; done < /app/names.txt > /app/greetings.txt
