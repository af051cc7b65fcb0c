# Shell helpers shared by bench/run.sh and bench/soak.sh (sourced, not run).
# Both start their servers on fixed loopback ports under a work folder ($work).

# ports_free FIRST LAST KNOB: exits 1 unless nothing listens on 127.0.0.1:FIRST..LAST;
# KNOB names the variable that moves the ports.
ports_free() {
  for p in $(seq "$1" "$2"); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "port $p on 127.0.0.1 is taken: set $3" >&2
      exit 1
    fi
  done
}

# wait_port PORT: waits up to 10 s for something to listen on 127.0.0.1:PORT.
wait_port() {
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on 127.0.0.1:$1 (see $work/*.log)" >&2
  exit 1
}
