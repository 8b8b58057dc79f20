#!/bin/sh
# SPDX-License-Identifier: GPL-3.0-or-later
# launch.sh torchrun|slurm N PORT LOGDIR CMD...
# Starts N processes of CMD on this machine with exactly the variables `torchrun --no-python` (torchrun) or `srun`
# (slurm, with MASTER_ADDR/MASTER_PORT given as a batch script would) sets for each, stdout and stderr of rank R in
# LOGDIR/rankR.out and .err; waits for all and prints "rank R exit STATUS" for each.
style=$1 n=$2 port=$3 logs=$4
shift 4
r=0
while [ "$r" -lt "$n" ]; do
    if [ "$style" = torchrun ]; then
        MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n GROUP_RANK=0 \
            ROLE_RANK=$r ROLE_WORLD_SIZE=$n TORCHELASTIC_RESTART_COUNT=0 "$@" >"$logs/rank$r.out" 2>"$logs/rank$r.err" &
    else
        MASTER_ADDR=127.0.0.1 MASTER_PORT=$port SLURM_PROCID=$r SLURM_NTASKS=$n SLURM_STEP_NUM_TASKS=$n SLURM_LOCALID=$r SLURM_NODEID=0 \
            SLURM_NNODES=1 SLURM_TASKS_PER_NODE=$n "$@" >"$logs/rank$r.out" 2>"$logs/rank$r.err" &
    fi
    eval "pid$r=\$!"
    r=$((r + 1))
done
r=0
while [ "$r" -lt "$n" ]; do
    eval "wait \$pid$r"
    echo "rank $r exit $?"
    r=$((r + 1))
done
