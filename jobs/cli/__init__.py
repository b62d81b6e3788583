"""mlsched's command line, over the REST API: `python -m jobs.cli COMMAND ...`.

    submit FILE [--dependency DEPS] [--begin TIME] [--deadline TIME] [--max-running N]
                [--min-workers N] [--topology KEY] [--exclude NODE[,NODE...]]
                [--only-nodes NODE[,NODE...]] [--constraint FEATURE[&FEATURE...]] [--exclusive]
                [--retry-exit-codes CODE[,CODE...]] [--first-type-wait DURATION]
                [--label KEY=VALUE ...] [--volume NAME:PATH[:rw] ...] [--notify-start]
                [--notify-requeue] [--notify-time-limit] [--notify-email]
                [--test-only | --wait]
                     submit the job described in a JSON or YAML file ("-" for standard
                     input; in YAML, times such as begin are read as written); DEPS
                     adds to its depends_on, as Slurm's --dependency writes them: job ids
                     to wait for them to succeed ("12,13"), or a kind and its ids
                     ("afterany:12:13", "afternotok:14"; ids after it take its kind too),
                     and "singleton" to wait for your earlier jobs of its name to end
                     ("afterok:12,singleton"); --depends-on is the same option. --begin
                     TIME sets its begin, as Slurm's --begin: not started before then, a time
                     with its zone ("2026-12-03T02:00:00Z") or from now by the server's
                     clock ("now+90m", "now+2h"; s, m, h, d, seconds without a unit).
                     --deadline TIME, written the same
                     way, as Slurm's --deadline: canceled while queued once it could no longer
                     end by then (started at once and running its max_runtime_s).
                     --max-running N: at most N of a batch's shards run at once, the others
                     waiting until one ends, as Slurm's --array=0-999%N (its
                     max_running_shards). --min-workers N makes a training gang elastic,
                     as torchrun's --nnodes=N:MAX: when all its workers do not fit, it
                     starts with as many as fit now, at least N (its min_workers; N equal
                     to its workers: rigid). --topology KEY keeps a training gang's nodes
                     in one domain: all share one value of that node topology label (rack,
                     nvlink, zone), as Slurm's --switches. --exclude NODE,NODE: it never
                     runs on these nodes (its exclude_nodes; Slurm's --exclude; any
                     cluster's node of that name). --only-nodes NODE,NODE: it runs on
                     these nodes alone (its only_nodes; any cluster's node of that name;
                     none it excludes). --exclusive: each worker takes a
                     node to itself, one of exactly its GPUs (every GPU of it; CPU only: a
                     node without GPUs), and no other job runs there while it does (its
                     exclusive; Slurm's --exclusive). --retry-exit-codes 75,134-139:
                     these exits of its own code are retried within its retries, as
                     infrastructure failures are (its retry_exit_codes; a worker killed
                     by signal N exits 128+N). --label KEY=VALUE adds a label
                     of your own to its labels (again for more), to find it by (list
                     --label). --volume NAME:PATH mounts your team's data volume NAME (see
                     volumes) at PATH in each worker, read only; NAME:PATH:rw to write to
                     it, where the volume allows (again for more; added to its volumes).
                     --notify-start: your team's webhook is told when it starts (its
                     notify_start), as Slurm's --mail-type=BEGIN; --notify-requeue: each
                     time it is stopped and queued again (notify_requeue), as
                     --mail-type=REQUEUE; --notify-time-limit: when a run has used 90 %
                     of its runtime limit (notify_time_limit), as
                     --mail-type=TIME_LIMIT_90; --notify-email: you are emailed what
                     your team's webhook is told of it (notify_email), as --mail-user.
                     --test-only submits nothing: it prints whether the scheduler would
                     start the job now and where, or why it would wait and its estimated
                     start, as Slurm's sbatch --test-only. --wait then waits for it to
                     end, as wait does, and exits as it did (Slurm's sbatch --wait)
    depend ID DEPS   replace a queued job's dependencies with DEPS, written as above ("" or
                     "none" for none): Slurm's scontrol update dependency=
    list [--state S[,S...]] [--id ID[,ID...]] [--held] [--batch ID] [--label KEY=VALUE ...]
         [--tenant SLUG] [--name TEXT] [--mine] [--since TIME] [--until TIME] [--node NAME]
         [--limit N]
                     your jobs, newest first (all of them, or the newest N): id, state,
                     family, submitter, GPUs asked (workers x GPUs each, a share in
                     thousandths: 250m; a gang kept in one domain adds its topology:
                     4x8@rack, all in one rack; a CPU-only one gives its workers: 4w@rack;
                     "!" after them: each worker takes a node to itself, 2x8!, a CPU-only
                     job's 2w!), time (squeue's TIME, D-HH:MM:SS: how long a queued job
                     has waited since its submission, a scheduled one since its placement,
                     a running one has run, an ended one ran, "-" if it never did; a
                     batch: its first shard's), name and why it waits (a queued one's place in
                     line first: "4th in line, quota_exceeded") or ended; --state: those
                     in that state, or in any of several (queued,running); --id: those
                     jobs alone (squeue -j); --held: only the held ones; --batch: the
                     shards of one batch (its id: the job its submission returned);
                     --label: those carrying the label (KEY alone: with any value), each
                     --label narrowing the rest; --tenant: one team's; --name: those whose
                     name holds TEXT; --mine: those you submitted (Slurm's squeue --me);
                     --since: those not ended before TIME, --until: those submitted before
                     it (Slurm's sacct -S and -E; now-1d, a day: 2026-12-05, from 00:00
                     UTC, or ISO 8601 with its zone): --state failed --since now-1d, what
                     failed in the last day; --node: those that ran on that node (Slurm's
                     squeue -w)
    status ID [--json]
                     one job: on a terminal, described a field to a line, as kubectl
                     describe and Slurm's scontrol show job give it (its state and why it
                     waits or ended, what it asks, its image and command, labels, volumes,
                     priority, retries, dependencies and times; a batch: its shards counted
                     by state), then each attempt (how it ended, where, for how long, the
                     nodes and GPUs it held) and its last moves; with --json, or when the
                     output is not a terminal, the job as JSON (a batch: its shards by
                     state, shard_states, and its limit on shards running at once,
                     max_running_shards; an elastic gang: its min_workers, and each
                     attempt's workers, the size it started with; a gang kept in one
                     domain: its topology; its data volumes, each with its path and
                     read_only)
    efficiency ID    what each of its attempts used of what it asked for, as Slurm's seff:
                     how long it ran of its runtime limit, the cores it kept busy on
                     average over its run and its largest worker's memory peak, each
                     against the request ("1.8 of 4 cores (45 %)"); an elastic gang's
                     fewest workers, a gang's topology domain ("all in one rack"), an
                     attempt that started with fewer than all, and why a failed or
                     canceled job ended ("failed: worker 0 exited with code 3")
    queue [--tenant SLUG] [--mine] [--limit N]
                     your teams' waiting jobs in the order the last placement cycle left
                     them, as Kueue's pending workloads and Slurm's squeue with sprio give
                     them: each one's team, submitter, place in line (every team's jobs
                     counted) and in its team's, id, GPUs asked, time waited, priority
                     points inside its team (its priority, plus points for its wait, less
                     points for its size and its submitter's GPUs: status says them term by
                     term), class, name and why it waits, after each team's fair share
                     and its turn among the teams waiting (sshare); --tenant: one team's;
                     --mine: the ones you submitted (squeue --me); --limit N: the first N
    spec ID [--yaml] the job as a submission of it is written (JSON, or YAML), to keep or to
                     change and submit: `spec 12 > job.json`, then `submit job.json` (a
                     batch's shard: its batch's), as Slurm's scontrol write batch_script
    wait ID [ID ...] [--timeout SECONDS]
                     block until the job has ended (a batch: every shard), as kubectl wait
                     does, saying each change of its state on standard error, then print
                     how it ended ("failed: worker 0 exited with code 3") and exit 0 if it
                     succeeded, with its last attempt's exit code if it failed with one,
                     else 1 (a batch that failed: 1); 124 if it has not ended within
                     --timeout. Several jobs (a sweep's): a line each as it ends, after its
                     id, and 0 once all succeeded, else 1. It reads the jobs every second at
                     first, every ten at most (several by the list, 100 a request), and asks
                     again for five minutes while the server does not answer or answers
                     5xx (a restart)
    cancel [ID ...] [--name NAME] [--state S] [--tenant SLUG] [--mine] [--label KEY=VALUE ...]
                     cancel a job (a batch: every shard), or every live job you may cancel
                     that the ids and filters name together, as Slurm's scancel does
                     (--label: those carrying every label given, a sweep's jobs)
    hold ID          keep a queued job (a batch: its queued shards) from starting
    release ID       let a held job start again
    requeue ID [--hold]
                     stop a scheduled or running job (a batch: its running shards), with its
                     grace period to checkpoint, and queue it again without using a retry, as
                     Slurm's scontrol requeue; --hold: held once queued (requeuehold)
    label ID [KEY=VALUE ...] [--remove KEY ...]
                     set labels of your own on a job (a batch: every shard), in any state, and
                     remove others, as kubectl label does; it prints the labels it is left with
    notify ID [--start | --no-start] [--requeue | --no-requeue] [--time-limit | --no-time-limit]
              [--email | --no-email]
                     change what a job that has not ended is told of (a batch: every shard),
                     as Slurm's scontrol update MailType= MailUser=: its start, each requeue,
                     90 % of its runtime limit used, to its team's webhook, and an email of
                     them and its end to its submitter; the others are kept
    retries ID [--max N] [--exit-codes CODE[,CODE...] | --no-exit-codes]
               [--user-errors | --no-user-errors]
                     change what a job that has not ended (a batch: every shard) retries:
                     the most retries it may use, the exit codes of its own code retried
                     (replacing those it had), or every failure of its own; its next
                     failure follows them
    priority ID [--class NAME] [--value N]
                     move a queued job (a batch: its queued shards) to another priority class,
                     or to another priority within its class (-1000 to 1000)
    shard-limit ID N|none
                     let at most N of a queued or running batch's shards run at once from
                     now on ("none": no limit), as Slurm's scontrol update
                     ArrayTaskThrottle=; a lower limit stops no shard, the batch starts no
                     more until fewer run
    min-workers ID N|none
                     let a queued training gang start with as few as N of its workers when
                     all do not fit (elastic, as torchrun's --nnodes=N:MAX), keeping its
                     place in the queue, as Slurm's scontrol update NumNodes=MIN-MAX does
                     for a pending job; "none" (or N equal to its workers): all of them start
                     together (rigid)
    runtime-limit ID DURATION
                     change a job's (a batch: its live shards') runtime limit: seconds, or N
                     with m, h or d (90m, 12h, 2d), as Slurm's scontrol update TimeLimit=;
                     while queued, a shorter limit is a smaller job, which starts sooner in a
                     gap before other work or a maintenance window; a job placed takes only a
                     lower limit, and stops as timed out once it has run that long
    resize ID [--cpu-milli N] [--memory-mb N] [--gpus N] [--gpu-milli N]
                     change what each worker of a queued job (a batch: its queued shards)
                     asks for, the rest kept, as Slurm's scontrol update of a pending job's
                     NumCPUs, MinMemoryNode and Gres; it keeps its place in the queue; a job
                     placed keeps what it started with
    constrain ID [--gpu-types T[,T...] | --any-gpu-type]
                 [--cluster-selector KEY=VALUE ... | --any-cluster]
                 [--exclude NODE[,NODE...] | --no-exclude]
                 [--only-nodes NODE[,NODE...] | --any-node]
                 [--constraint FEATURE[&FEATURE...] | --no-constraint]
                 [--first-type-wait DURATION | --no-first-type-wait]
                 [--exclusive | --shared]
                     change where a queued job (a batch: its queued shards) may run: the GPU
                     types it takes, most preferred first, the labels a cluster must carry,
                     the nodes it never runs on, those it runs on alone, the features its
                     nodes must offer, how long it takes its first GPU type alone (from when
                     it may run) and whether each worker takes a node to itself, as Slurm's
                     scontrol update of a pending job's Features, Partition and ExcNodeList;
                     it keeps its place in the queue; a job placed keeps where it runs
    resubmit ID [--shards unsucceeded|3,17,512]
                     run an ended job again as a new job with the same spec (a batch: all of
                     it); --shards: only the batch's shards that did not succeed (failed or
                     were canceled), or those named, as Slurm's sbatch --array=3,17,512; each
                     keeps its index and the batch's shard count
    logs ID [-f] [--tail N] [--shard N] [--worker RANK] [--attempt N] [--grep TEXT]
                     a job's output; -f follows it until the job ends; --tail N: only its
                     last N lines (1 to 5000; as kubectl logs --tail), then on from
                     there with -f. A batch's shards
                     each have their own: its id alone shows shard 0's (a rerun of some
                     shards: its lowest's; it says so on standard error), --shard N shard
                     N's (0 to shards-1), as Slurm's ID_N names a task of a job array.
                     --worker RANK: only that worker's lines (0 to workers-1), as kubectl
                     logs reads one pod; --attempt N: only its attempt N's; --grep TEXT:
                     only the lines holding TEXT, in any case (with --tail, the last N of
                     those). Followed, it asks again for five minutes while the server
                     does not answer or answers 5xx (a restart), as wait does
    usage [--since YYYY-MM-DD] [--until YYYY-MM-DD] [--tenant SLUG] [--by-label KEY]
          [--by-user] [--by-class] [--daily] [--json]
                     GPU-hours, CPU core-hours, their cost at the platform's rate card in
                     force on the days they were used, waste, jobs finished and queue waits
                     of your tenants, by GPU type (default: the last 30 days); --by-label: then
                     each tenant's usage by its jobs' values of that label ("(none)": jobs
                     without it), as chargeback by project; --by-user: then by the users
                     who submitted its jobs, as Slurm's sreport user top; --by-class:
                     then by the priority classes its jobs ran at. --daily: instead, the
                     GPU-hours and CPU core-hours of each UTC day, a line per day and tenant
                     (GPU type "all") and one for each GPU type it used, the days adding up
                     to the report's figures. --json: the API's JSON
    quota [--tenant SLUG]
                     per tenant and flavor: guaranteed, borrow limit, lend limit (how much
                     of its idle guarantee its cohort may borrow), in use, borrowed, and
                     how much more it may start now; jobs queued and waiting for quota
    classes [--tenant SLUG]
                     the priority classes your tenants may submit at: value, whether it may
                     preempt, its exempt time and longest runtime limit, which tenants
    rates [--json]   the platform's rate card in force today, what usage prices an hour of
                     each flavor at: flavor, price (to the cent, or to every place it has
                     beyond) and what it is per, in the platform's currency
                     ("gpu:A100  2.50  USD a GPU-hour"), or "No prices are set."; then a
                     line for each change scheduled ("scheduled: gpu:A100 3.00 USD a
                     GPU-hour from 2027-01-01"); with --json, the API's JSON
    maintenance      the clusters' maintenance windows not yet ended: id, cluster, nodes
                     ("all": every node of it), from, to (UTC), in progress or upcoming,
                     reason. Until a window starts only work sure to end by then is placed on
                     its nodes; from then to its end nothing is, and work still there is
                     requeued
    maintenance-add CLUSTER --from TIME --to TIME [--nodes NODE[,NODE...]] [--reason TEXT]
    maintenance-delete ID
    booking-add TENANT CLUSTER --from TIME --to TIME [--nodes NODE[,NODE...]] [--reason TEXT]
    booking-delete ID
                     platform admins: plan a maintenance window, or book nodes for a tenant
                     (TIME as --begin takes it, its nodes by name, every node of the cluster
                     without --nodes), saying how many running jobs it will stop at its
                     start; take one back
    bookings [--tenant SLUG]
                     your tenants' bookings not yet ended (--tenant: one of them), as
                     maintenance lists windows, each with its tenant. From a booking's start
                     to its end only its tenant's work starts on its nodes, and other
                     tenants' work still there is requeued; before the start, only its
                     tenant's work and work sure to end by then is placed there
    volumes [--tenant SLUG]
                     your tenants' data volumes (--tenant: one of them), which their jobs
                     mount (submit --volume): each one's tenant, name, whether jobs may
                     write to it, the clusters that have it ("all": every cluster; a job
                     mounting it runs only there) and its description
    secrets TENANT   the tenant's secrets (values its jobs get as environment variables or
                     files): each one's name, when it was set (UTC) and by whom, and of
                     registry credentials their registry and user; once the tenant gives
                     one as a file, each one's kind (variable, file, credential); never a
                     value
    secret-set TENANT NAME [--from-file PATH]
               [--registry HOST --username USER | --as-file | --variable]
                     set a secret of a tenant you own (any tenant, for a platform admin),
                     created or replaced: its value read from standard input (asked for
                     without echo at a terminal) or from the file PATH, less one trailing
                     newline (echo's, an editor's); never from the command line, where the
                     shell's history and the process list would keep it. With --as-file,
                     jobs get it as a file (a service account's key, a kubeconfig), the
                     variable NAME holding the file's path. With --registry, the team's pull
                     credential for that registry (ghcr.io, docker.io, ...): its jobs'
                     images from there are pulled with it, the value its password or token;
                     a credential set again without them is refused unless --variable or
                     --as-file replaces it, and so is a file set again without --as-file
                     unless --variable makes it an environment variable; a secret another
                     owner changed to another kind meanwhile is not replaced (error 409),
                     nor is a server's answer that stored another kind than asked taken
    secret-delete TENANT NAME
                     delete a secret; refused while jobs not yet ended name it (those
                     jobs' ids are in the error): replace it instead
    clusters         each cluster, as Slurm's sinfo: its agent's health, its nodes by state
                     (idle, mixed, allocated, other: down, maintenance, quarantined,
                     drained, draining, booked for another team) and per GPU type its GPUs,
                     allocated, and idle on nodes that would take your work now, and its
                     placement cost (work starts on the cheapest that can hold it)
    nodes [--cluster NAME] [--state S] [--gpu-type TYPE]
                     every node, as Slurm's sinfo -N: its state, GPU type, GPUs, CPUs and
                     memory (GiB) allocated of all, the features it offers, and its next
                     maintenance window or booking (yours: for one of your teams)
    whoami           who your token speaks for: your username, email address (where jobs
                     that ask are emailed), your teams and your role in each, the token's name
    login [--browser] [--name NAME]
                     sign in through the browser, as gh auth login does: it prints a page of
                     the portal and a code; approved there (signed in, single sign-on
                     included), it keeps the API token it gets for MLSCHED_URL in the
                     credentials file (--browser: it opens the page too; --name: the
                     token's name, "mlsched CLI on <host>" by default)
    logout           forget the token login kept for MLSCHED_URL (it works on until it
                     expires, unless revoked on the portal's API tokens page)
    cordon CLUSTER NODE [--reason TEXT] | drain CLUSTER NODE [--reason TEXT] |
    uncordon CLUSTER NODE
                     platform admins: place nothing new on a node, or also stop its work
                     (asked to stop with the grace to checkpoint, requeued without using a
                     retry), or place work there again, as Slurm's scontrol update
                     NodeName= State=DRAIN|RESUME Reason=; it prints the node's state after
    pause TENANT --reason TEXT | resume TENANT
                     platform admins: start none of a team's queued jobs (what runs runs on,
                     and it may still submit; its jobs wait saying the reason), or place
                     them again, as Kueue's ClusterQueue stopPolicy Hold
    apply-teams FILE [--dry-run]
                     platform admins: make the teams, their quotas and the priority classes
                     what a YAML or JSON file kept under version control declares (the
                     server's manage.py apply_teams), all of it or, refused, none; a line
                     per change
    export-teams [--tenant SLUG ...]
                     platform admins: the teams (every field, quotas, default class,
                     members given by hand) and the priority classes as the YAML file
                     apply-teams takes, on standard output; applying it changes nothing
    members TENANT   the team's members: each one's name, role (owner, member, viewer) and
                     what gives it (a sign-on group, or by hand)
    member-add TENANT USER [--role ROLE] | member-set TENANT USER ROLE |
    member-remove TENANT USER
                     a team's owners: add a user (a member by default), change a member's
                     role, remove a member, as the portal's Teams page does (not a
                     sign-on group's members, nor the last owner)
    history [--since TIME] [--until TIME] [--user NAME] [--kind KIND] [--limit N]
                     platform admins: who changed how the platform is set up, newest first
                     (the admin's edits, and the API's, the portal's and the sign-on
                     groups' changes): when, who, what and to which object
    sign-ins [--since TIME] [--user NAME] [--failed] [--limit N]
                     platform admins: the sign-ins and the attempts that failed, newest
                     first: when, the name given, how (password, proxy, oidc), ok or
                     failed, the client's address and why it failed

MLSCHED_URL (default: the server mlsched.pyz was downloaded from, at its /cli/mlsched.pyz;
else http://127.0.0.1:8000) and MLSCHED_TOKEN (a personal API token from the portal's API
tokens page, /tokens/) say where and who; without MLSCHED_TOKEN, the token login
kept for MLSCHED_URL in credentials.json ($MLSCHED_CONFIG_DIR, else $XDG_CONFIG_HOME/mlsched,
else ~/.config/mlsched; readable by you alone). Plain HTTP: no Django needed.

An error exits 1 with one line on standard error (2, after a usage line, for a wrong command
line). A request the
server's rate limit refuses is asked again once its Retry-After has passed, if that is at most
a minute away; further away, it is an error that says when. One the server could not carry out
(a 503 with Retry-After: its database restarting or failing over) is asked again the same way,
up to 6 times in a row; `submit` and `resubmit` send an idempotency key of their own (unless
the job file names one), so a submission asked again is made once.
"""

from jobs.cli.commands import trial_line
from jobs.cli.written import dependencies_written, dependency_items

__all__ = ["dependencies_written", "dependency_items", "trial_line"]
