#!/usr/bin/env bash
# Screenshots of the Prefect and MLflow UIs over a project's stores, in headless Chromium (apt-get install chromium).
# usage: scripts/screenshots.sh PROJECT OUTDIR   (PROJECT: a folder where the main job ran)
# env: DS (dataset, default ICEWS14); SWEEP (sweep whose experiment is shot, default choices); VENV (default PROJECT/.venv, else this repo's .venv)
set -u
P=$(cd "$1" && pwd); O=$2; mkdir -p "$O"; O=$(cd "$O" && pwd)
HERE=$(cd "$(dirname "$0")/.." && pwd)
DS=${DS:-ICEWS14}
VENV=${VENV:-$P/.venv}; [ -x "$VENV/bin/python" ] || VENV=$HERE/.venv
PY=$VENV/bin
PP=4311; MP=5011
export PREFECT_HOME=$P/.prefect PREFECT_UI_API_URL=http://127.0.0.1:$PP/api PREFECT_API_URL=http://127.0.0.1:$PP/api PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=true MLFLOW_DISABLE_TELEMETRY=true
$PY/prefect server start --host 127.0.0.1 --port $PP > "$O/prefect.log" 2>&1 &
PREFECT_PID=$!
(cd "$P" && exec $PY/mlflow server --host 127.0.0.1 --port $MP --backend-store-uri sqlite:///$P/mlflow.db --default-artifact-root $P/mlruns > "$O/mlflow.log" 2>&1) &
MLFLOW_PID=$!
stop() { kill $PREFECT_PID $MLFLOW_PID 2>/dev/null; wait $PREFECT_PID $MLFLOW_PID 2>/dev/null; }
trap stop EXIT
for i in $(seq 90); do curl -sf http://127.0.0.1:$PP/api/health >/dev/null && curl -sf http://127.0.0.1:$MP/health >/dev/null && break; sleep 1; done
shot() { chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size=${3:-1500,950} --virtual-time-budget=${4:-20000} --screenshot="$O/$1" "$2" 2>/dev/null; }
# the newest flow run whose name is $1 (or starts with $1 when $2 is "prefix")
flowrun() { curl -s -X POST http://127.0.0.1:$PP/api/flow_runs/filter -H 'Content-Type: application/json' -d '{"sort":"START_TIME_DESC","limit":200}' | $PY/python -c "import json,sys; r=[x for x in json.load(sys.stdin) if x['name']=='$1' or ('${2:-}'=='prefix' and x['name'].startswith('$1'))]; print(r[0]['id'] if r else '')"; }
expid() { curl -s "http://127.0.0.1:$MP/api/2.0/mlflow/experiments/get-by-name?experiment_name=$1" | $PY/python -c "import json,sys; print(json.load(sys.stdin).get('experiment',{}).get('experiment_id',''))"; }
q() { $PY/python -c "import urllib.parse,sys; print(urllib.parse.quote(sys.argv[1]))" "$1"; }
FR=$(flowrun pipeline); echo "pipeline $FR"
[ -n "$FR" ] && shot prefect-pipeline-run.png "http://127.0.0.1:$PP/runs/flow-run/$FR"
FD=$(flowrun pipeline- prefix); echo "dvc repro parent $FD"
[ -n "$FD" ] && shot prefect-dvc-repro-run.png "http://127.0.0.1:$PP/runs/flow-run/$FD"
FT=$(flowrun finetune-$DS-raptor); echo "finetune $FT"
[ -n "$FT" ] && shot prefect-finetune-artifacts.png "http://127.0.0.1:$PP/runs/flow-run/$FT?tab=Artifacts"
E=$(expid raptor/$DS); echo "exp $E"
shot mlflow-runs.png "http://127.0.0.1:$MP/#/experiments/$E/runs?workflowType=machine_learning"
shot mlflow-charts.png "http://127.0.0.1:$MP/#/experiments/$E/runs?workflowType=machine_learning&compareRunsMode=CHART"
EA=$(expid raptor/$DS/ablation-pretrain-epochs); echo "ablation exp $EA"
if [ -n "$EA" ]; then
  # the newest run of every (arm, seed) (tag pretrain_epochs): what a user selects before "Compare"
  RUNS=$(curl -s -X POST http://127.0.0.1:$MP/api/2.0/mlflow/runs/search -H 'Content-Type: application/json' -d "{\"experiment_ids\":[\"$EA\"],\"max_results\":1000,\"order_by\":[\"attributes.start_time DESC\"]}" | $PY/python -c "
import json,sys
rs=json.load(sys.stdin).get('runs',[])
tags=lambda r: {t['key']: t['value'] for t in r['data'].get('tags',[])}
arms={}
for r in rs:
    t=tags(r)
    if 'pretrain_epochs' in t: arms.setdefault((int(t['pretrain_epochs']), t.get('seed')), r['info']['run_id'])
print(json.dumps([arms[k] for k in sorted(arms)]))")
  echo "ablation runs $RUNS"
  URL="http://127.0.0.1:$MP/#/compare-runs?runs=$(q "$RUNS")&experiments=$(q "[\"$EA\"]")&workflowType=machine_learning"
  shot mlflow-ablation-compare-default.png "$URL" 1500,1400
  $PY/python "$HERE/scripts/ui_shot.py" "$URL" "$O/ablation-compare.png" --click "Scatter Plot" --size 1500,1400 --wait 20
fi
ES=$(expid raptor/$DS/sweep-${SWEEP:-choices}); echo "sweep exp $ES"
if [ -n "$ES" ]; then
  # every run of the sweep except its parent (whose per-arm means would crowd the view), as "Compare" shows them
  RS=$(curl -s -X POST http://127.0.0.1:$MP/api/2.0/mlflow/runs/search -H 'Content-Type: application/json' -d "{\"experiment_ids\":[\"$ES\"],\"max_results\":1000,\"filter\":\"tags.arm LIKE '%'\",\"order_by\":[\"attributes.run_name ASC\"]}" | $PY/python -c "
import json,sys
print(json.dumps([r['info']['run_id'] for r in json.load(sys.stdin).get('runs',[])]))")
  echo "sweep runs $RS"
  URL="http://127.0.0.1:$MP/#/compare-runs?runs=$(q "$RS")&experiments=$(q "[\"$ES\"]")&workflowType=machine_learning"
  shot mlflow-sweep-compare.png "$URL" 1500,1400
fi
