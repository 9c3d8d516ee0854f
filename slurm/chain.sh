# A run that continues over as many Slurm jobs as it needs: sourced by run.sbatch and
# spectral.sbatch (from the folder of the submission, the repository root).
#
# chain_run OUT COMMAND...  starts COMMAND (the run, under srun or mpirun) in the background,
# forwards USR1 that this script gets (from --signal=B:USR1@LEAD before the time limit, or
# `scancel --batch --signal=USR1`) to it, waits for it, and then ends the job or requeues it
# (`scancel --signal=USR1 JOB` signals the run itself; at the time limit Slurm sends TERM to
# every process of the job, the run included, and SIGKILL after KillWait):
#   0                  the run reached t_end: the chain ends
#   1 (or another status below 64)
#                      an error (bad configuration, missing file, ...): the chain ends, never
#                      requeued; the run's message is above in the job's output
#   75                 interrupted with a checkpoint: requeued, the next job continues with
#                      --restart (the caller looks for the checkpoint at the start)
#   above 128, 130     killed (Slurm's KILL after its grace, the OOM killer, a second signal):
#                      the newest checkpoint on disk is the last good state; requeued
# A job is requeued only when this job wrote a checkpoint (otherwise the next one would not get
# further: the chain ends, saying so), when it was not cancelled (scancel without --signal), and
# at most VORTEX_MAX_REQUEUES times in all (default 100). Each decision is one line of the
# job's output starting with "chain:".

# The newest checkpoint of OUT as "mtime size name" (empty: none).
chain_checkpoint() {
    # (a checkpoint is renamed into place: a new one has a new inode and modification time)
    local f newest="" best=0 m
    for f in "$1/checkpoint.bin" "$1/checkpoint.manifest"; do
        [[ -f $f ]] || continue
        m=$(stat -c %Y "$f")
        if ((m >= best)); then
            best=$m
            newest="$(stat -c '%i %.9Y %s' "$f") ${f##*/}"
        fi
    done
    echo "$newest"
}

# Whether Slurm is ending this job for another reason than its time limit (scancel).
chain_cancelled() {
    local st
    st=$(squeue -h -j "$SLURM_JOB_ID" -o "%T %r" 2>/dev/null) || return 1
    [[ $st == COMPLETING* || $st == CANCELLED* ]] && [[ $st != *TimeLimit* ]]
}

chain_run() {
    local out=$1
    shift
    local job=${SLURM_JOB_ID:?chain_run runs inside a Slurm job}
    local restarts=${SLURM_RESTART_COUNT:-0} max=${VORTEX_MAX_REQUEUES:-100}
    local start_ck
    start_ck=$(chain_checkpoint "$out")
    local from="a fresh start"
    [[ -n $start_ck ]] && from="continuing from ${start_ck##* }"
    echo "chain: job $job (start $((restarts + 1))) on $(hostname) at $(date -u +%FT%TZ): $from"
    chain_signal=""
    chain_pid=""
    # USR1 goes on to the run (it finishes its step and checkpoints), once: a second signal
    # would make it stop at once; TERM reaches the run from Slurm itself
    chain_forward() {
        echo "chain: $1 at $(date -u +%T), $(squeue -h -j "$job" -o %L 2>/dev/null) left${2:+; $2}"
        if [[ -n ${2:-} && -z $chain_signal ]]; then
            chain_signal=$1
            [[ -n $chain_pid ]] && kill -USR1 "$chain_pid" 2>/dev/null
        fi
        return 0
    }
    trap 'chain_forward USR1 "asking the run to checkpoint"' USR1
    trap 'chain_forward TERM' TERM
    "$@" &
    chain_pid=$!
    local status=0
    # `wait` returns early when a trapped signal arrives: wait again until the run has exited
    while :; do
        wait "$chain_pid"
        status=$?
        kill -0 "$chain_pid" 2>/dev/null || break
    done
    local end_ck
    end_ck=$(chain_checkpoint "$out")
    if ((status == 0)); then
        echo "chain: the run completed (status 0): $out"
        exit 0
    fi
    if ((status != 75 && status < 128)); then
        echo "chain: the run failed (status $status): not requeued; its error is above and in" \
            "$out/run.json"
        exit "$status"
    fi
    local what="interrupted with a checkpoint (status 75)"
    ((status == 75)) || what="killed (status $status); the newest checkpoint is the last good state"
    if [[ -z $end_ck || $end_ck == "$start_ck" ]]; then
        echo "chain: the run was $what but wrote no checkpoint in this job: not requeued (the" \
            "next job would not get further; give the job more time or checkpoint more often)"
        exit "$status"
    fi
    if chain_cancelled; then
        echo "chain: the run was $what; the job was cancelled: not requeued"
        exit "$status"
    fi
    if ((restarts >= max)); then
        echo "chain: the run was $what; requeued $restarts times already" \
            "(VORTEX_MAX_REQUEUES=$max): not again"
        exit "$status"
    fi
    echo "chain: the run was $what (${end_ck##* }); requeueing job $job"
    scontrol requeue "$job"
    exit "$status"
}
