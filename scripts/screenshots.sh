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
# the Artifacts tab (the URL's ?tab= does not open it in Prefect 3's UI: click it)
[ -n "$FT" ] && $PY/python "$HERE/scripts/ui_shot.py" "http://127.0.0.1:$PP/runs/flow-run/$FT" "$O/prefect-finetune-artifacts.png" --sleep 8 \
  --click "Artifacts" --size 1500,950 --wait 20
E=$(expid raptor/$DS); echo "exp $E"
shot mlflow-runs.png "http://127.0.0.1:$MP/#/experiments/$E/runs?workflowType=machine_learning"
# charts of the systems' seed-aggregate runs, the Assistant panel shut, time for the charts to draw
$PY/python "$HERE/scripts/ui_shot.py" "http://127.0.0.1:$MP/#/experiments/$E/runs?workflowType=machine_learning&compareRunsMode=CHART&searchFilter=$(q "tags.aggregate = 'seeds'")" \
  "$O/mlflow-charts.png" --eval "localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false'); localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true'); 'set'" \
  --reload --size 1500,950 --wait 30 || echo "mlflow-charts.png: a step failed (see above)"
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

# --- issue 42: training logged epoch by epoch in Prefect, the systems side by side in MLflow, DVC's curves ---
# Prefect: the per-epoch lines ("<run> rl epoch 2/2: reward ..., val MRR ...") that tasks/train.py logs in
# the finetune flow's task runs; the flow run's Logs tab lists its task runs' logs too.
if [ -n "$FT" ]; then
  NEP=$(curl -s -X POST http://127.0.0.1:$PP/api/logs/filter -H 'Content-Type: application/json' -d "{\"logs\":{\"flow_run_id\":{\"any_\":[\"$FT\"]}},\"limit\":200}" | $PY/python -c "import json,sys; print(sum(' rl epoch ' in l['message'] for l in json.load(sys.stdin)))")
  echo "finetune epoch lines $NEP"
  if [ "${NEP:-0}" -gt 0 ]; then
    shot prefect-finetune-logs.png "http://127.0.0.1:$PP/runs/flow-run/$FT?tab=Logs" 1500,1100
  else echo "skip prefect-finetune-logs.png: flow run $FT logged no epoch line"; fi
else echo "skip prefect-finetune-logs.png: no flow run finetune-$DS-raptor"; fi

# MLflow: experiment raptor/$DS with one row per system (the seed-aggregate parents, tag aggregate = 'seeds') and
# the test metrics as columns. The runs table keeps its columns in localStorage, keyed by the experiment ids
# (MLflowLocalStorage-1.1-ExperimentPage-["<id>"]-ReactComponentState, field selectedColumns): set, then reload.
if [ -n "$E" ]; then
  # the aggregates are nested under their pipeline run: "runsExpanded" opens those parents
  AGG=$(curl -s -X POST http://127.0.0.1:$MP/api/2.0/mlflow/runs/search -H 'Content-Type: application/json' -d "{\"experiment_ids\":[\"$E\"],\"max_results\":1000,\"filter\":\"tags.aggregate = 'seeds'\"}" | $PY/python -c "
import json,sys
rs=json.load(sys.stdin).get('runs',[])
par={t['value'] for r in rs for t in r['data'].get('tags',[]) if t['key']=='mlflow.parentRunId'}
print(len(rs), json.dumps({p: True for p in sorted(par)}, separators=(',',':')))")
  NAGG=${AGG%% *}; EXPANDED=${AGG#* }
  echo "seed-aggregate runs $NAGG"
  if [ "${NAGG:-0}" -gt 0 ]; then
    COLS='["metrics.`test/mrr`","metrics.`test/hits_at_1`","metrics.`test/hits_at_10`","tags.`variant`"]'
    WIDTHS='{"attributes.`Run Name`":260,"metrics.`test/mrr`":130,"metrics.`test/hits_at_1`":150,"metrics.`test/hits_at_10`":150}'
    STATE="{\"selectedColumns\":$COLS,\"columnOrder\":$COLS,\"columnWidths\":$WIDTHS,\"runsExpanded\":$EXPANDED,\"runsHiddenMode\":\"SHOW_ALL\"}"
    # ... and the "MLflow Assistant" side panel (a third of the width) shut
    JS="localStorage.setItem('MLflowLocalStorage-1.1-ExperimentPage-' + JSON.stringify(['$E']) + '-ReactComponentState', JSON.stringify($STATE));
localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false'); localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true'); 'set'"
    # the pinned Run Name column is not resizable (nor its width kept): a style gives it the Created column's room
    WIDE_NAMES='(() => { const n = document.querySelector(".ag-header-cell[col-id=\"attributes.`Run Name`\"]"),
  c = document.querySelector(".ag-header-cell[col-id=\"runDateAndNestInfo\"]"); if (!n || !c) return "no Run Name/Created column";
  const s = document.createElement("style"); s.textContent = "[col-id=\"runDateAndNestInfo\"] { display: none !important; } " +
  "[col-id=\"attributes.`Run Name`\"] { width: " + (n.getBoundingClientRect().width + c.getBoundingClientRect().width) + "px !important; }";
  document.head.appendChild(s); return "run names widened"; })()'
    $PY/python "$HERE/scripts/ui_shot.py" "http://127.0.0.1:$MP/#/experiments/$E/runs?workflowType=machine_learning&searchFilter=$(q "tags.aggregate = 'seeds'")" \
      "$O/mlflow-systems-table.png" --eval "$JS" --reload --eval "$WIDE_NAMES" --size 1500,800 --wait 15 \
      || echo "mlflow-systems-table.png: a step failed (see above)"
  else echo "skip mlflow-systems-table.png: no run with tag aggregate = 'seeds' in raptor/$DS"; fi
fi

# DVC: `dvc plots show` in PROJECT, written to OUTDIR/dvc_plots (the project's own dvc_plots/ untouched), with
# vega, vega-lite and vega-embed from local files instead of DVC's CDN links, so that it renders offline:
# VEGA_DIR (default ~/.cache/raptor-tkg/vega) holds vega.min.js, vega-lite.min.js, vega-embed.min.js, fetched
# once with `npm pack` (the versions dvc-render links) when missing.
VEGA=${VEGA_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/raptor-tkg/vega}
if [ ! -s "$VEGA/vega.min.js" ] || [ ! -s "$VEGA/vega-lite.min.js" ] || [ ! -s "$VEGA/vega-embed.min.js" ]; then
  mkdir -p "$VEGA"; T=$(mktemp -d)
  if command -v npm >/dev/null && (cd "$T" && timeout 180 npm pack --silent vega@5.20.2 vega-lite@5.2.0 vega-embed@6.18.2 >/dev/null 2>&1); then
    for p in vega vega-lite vega-embed; do tar xzf "$T"/$p-[0-9]*.tgz -C "$T" package/build/$p.min.js && mv "$T/package/build/$p.min.js" "$VEGA/"; done
  fi
  rm -rf "$T"
fi
if [ -s "$VEGA/vega.min.js" ] && [ -s "$VEGA/vega-lite.min.js" ] && [ -s "$VEGA/vega-embed.min.js" ]; then
  cat > "$O/dvc-plots-template.html" <<HTML
<!DOCTYPE html>
<html>
<head>
    {refresh_tag}
    <meta charset="utf-8">
    <title>DVC Plot</title>
    <script src="file://$VEGA/vega.min.js"></script>
    <script src="file://$VEGA/vega-lite.min.js"></script>
    <script src="file://$VEGA/vega-embed.min.js"></script>
    <style> body { font-family: sans-serif; } table { border-spacing: 15px; } </style>
</head>
<body>
    {plot_divs}
</body>
</html>
HTML
  TPL=(--html-template "$O/dvc-plots-template.html")
else
  echo "dvc plots: no local vega (npm pack failed; set VEGA_DIR): the page loads it from a CDN, blank offline"; TPL=()
fi
rm -rf "$O/dvc_plots"
if (cd "$P" && PATH=$PY:$PATH dvc plots show -o "$O/dvc_plots" "${TPL[@]}" > "$O/dvc-plots.log" 2>&1) && [ -s "$O/dvc_plots/index.html" ]; then
  if grep -q "learning-reward-$DS\|learning-val_mrr-$DS" "$O/dvc_plots/index.html"; then
    # at 1.5x (vega's 300 px charts); DVC drops a plot none of whose files has its field, hence the grep
    chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars --force-device-scale-factor=1.5 \
      --window-size=1000,${DVC_PLOTS_HEIGHT:-800} --virtual-time-budget=20000 --screenshot="$O/dvc-plots.png" \
      "file://$O/dvc_plots/index.html" 2>/dev/null
  else echo "skip dvc-plots.png: dvc plots show drew no learning-*-$DS curve (see $O/dvc-plots.log)"; fi
else echo "skip dvc-plots.png: dvc plots show failed in $P (see $O/dvc-plots.log)"; fi
