#!/usr/bin/env bash
# Screenshots of the Prefect and MLflow UIs over a project's stores, in headless Chromium (apt-get install chromium).
# usage: scripts/screenshots.sh PROJECT OUTDIR   (PROJECT: a folder where the main job ran; its .venv is used)
set -u
P=$1; O=$2; mkdir -p $O
PY=$P/.venv/bin
PP=4311; MP=5011
export PREFECT_HOME=$P/.prefect PREFECT_UI_API_URL=http://127.0.0.1:$PP/api PREFECT_API_URL=http://127.0.0.1:$PP/api PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=true MLFLOW_DISABLE_TELEMETRY=true
$PY/prefect server start --host 127.0.0.1 --port $PP > $O/prefect.log 2>&1 &
(cd $P && exec $PY/mlflow server --host 127.0.0.1 --port $MP --backend-store-uri sqlite:///$P/mlflow.db --default-artifact-root $P/mlruns > $O/mlflow.log 2>&1) &
for i in $(seq 90); do curl -sf http://127.0.0.1:$PP/api/health >/dev/null && curl -sf http://127.0.0.1:$MP/health >/dev/null && break; sleep 1; done
shot() { chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size=${3:-1500,950} --virtual-time-budget=${4:-20000} --screenshot=$O/$1 "$2" 2>/dev/null; }
flowrun() { curl -s -X POST http://127.0.0.1:$PP/api/flow_runs/filter -H 'Content-Type: application/json' -d '{"sort":"START_TIME_DESC","limit":200}' | $PY/python -c "import json,sys; r=[x for x in json.load(sys.stdin) if x['name'].startswith('$1')]; print(r[0]['id'] if r else '')"; }
expid() { curl -s "http://127.0.0.1:$MP/api/2.0/mlflow/experiments/get-by-name?experiment_name=$1" | $PY/python -c "import json,sys; print(json.load(sys.stdin).get('experiment',{}).get('experiment_id',''))"; }
FR=$(flowrun pipeline); echo "pipeline $FR"
[ -n "$FR" ] && shot prefect-pipeline-run.png "http://127.0.0.1:$PP/runs/flow-run/$FR"
FT=$(flowrun finetune-ICEWS14-raptor); echo "finetune $FT"
[ -n "$FT" ] && shot prefect-finetune-artifacts.png "http://127.0.0.1:$PP/runs/flow-run/$FT?tab=Artifacts"
E=$(expid raptor/ICEWS14); echo "exp $E"
shot mlflow-runs.png "http://127.0.0.1:$MP/#/experiments/$E/runs?workflowType=machine_learning"
shot mlflow-charts.png "http://127.0.0.1:$MP/#/experiments/$E/runs?workflowType=machine_learning&compareRunsMode=CHART"
EA=$(expid raptor/ICEWS14/ablation-pretrain-epochs); echo "ablation exp $EA"
if [ -n "$EA" ]; then
  RUNS=$(curl -s -X POST http://127.0.0.1:$MP/api/2.0/mlflow/runs/search -H 'Content-Type: application/json' -d "{\"experiment_ids\":[\"$EA\"],\"max_results\":100}" | $PY/python -c "
import json,sys
rs=[r for r in json.load(sys.stdin).get('runs',[]) if any(t['key']=='pretrain_epochs' for t in r['data'].get('tags',[]))]
print(json.dumps([r['info']['run_id'] for r in rs]))")
  echo "ablation runs $RUNS"
  shot mlflow-ablation-compare.png "http://127.0.0.1:$MP/#/compare-runs?runs=$(python3 -c "import urllib.parse,sys; print(urllib.parse.quote(sys.argv[1]))" "$RUNS")&experiments=$(python3 -c "import urllib.parse,sys; print(urllib.parse.quote(sys.argv[1]))" "[\"$EA\"]")&workflowType=machine_learning" 1500,1400
fi
pkill -f "port $PP"; pkill -f "port $MP"; sleep 1
