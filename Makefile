# Every target sets up (or refreshes) the virtual environment first, so a fresh clone needs nothing else.
PY      := .venv/bin/python
STAMP   := .venv/.installed
export HF_HUB_OFFLINE ?= 1
export WANDB_MODE ?= offline
export TOKENIZERS_PARALLELISM := false
export PYTHONPATH := $(CURDIR)

.PHONY: venv test test-fast lint sweep families strategies-sweep search films tiny-models pareto bench gpu-check gpu-plan kernel-build hub-check strategies-check clean

venv: $(STAMP)
$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

tiny-models: venv  ## tiny random checkpoints for smoke runs (outputs/tiny/)
	test -f outputs/tiny/diffusion/config.json || $(PY) -m models.tiny diffusion outputs/tiny/diffusion
	test -f outputs/tiny/ar/config.json || $(PY) -m models.tiny ar outputs/tiny/ar
	test -f outputs/tiny/ar_draft/config.json || $(PY) -m models.tiny ar outputs/tiny/ar_draft --seed 1
	test -f outputs/tiny/masked/config.json || $(PY) -m models.tiny masked outputs/tiny/masked

# Two workers (pytest-xdist, one per core); tests that share a resource run on one worker (xdist_group marks:
# the Slurm cluster, the sandbox's process checks).
test: venv tiny-models  ## the whole test suite, then lint (CI runs this)
	$(PY) -m pytest -q -n 2 --dist loadgroup
	@command -v bwrap >/dev/null || echo "WARNING: bubblewrap is missing: LiveCodeBench grading refuses to run and the sandbox tests were skipped (apt-get install -y bubblewrap)"
	@command -v slurmctld >/dev/null || echo "WARNING: slurm-wlm/munge missing: the Slurm tests were skipped (apt-get install -y slurm-wlm munge, as root)"
	$(MAKE) --no-print-directory lint

test-fast: venv  ## the edit-test loop (two workers): every test except those marked slow, sandbox, gpu or slurm
	$(PY) -m pytest -q -n 2 --dist loadgroup -m "not slow and not sandbox and not gpu and not slurm"

lint: venv  ## ruff: lint (incl. import order) and format check; config in pyproject.toml
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# Two lanes of about equal work, one per core (each job decodes single-threaded; no two parts share a run
# dir); the summary and plots are drawn once, when both lanes are done.
SWEEP_LANES := sudoku_sweep,sudoku_remask+sudoku_confidence+sudoku_topk+sudoku_baselines
SWEEP_DIR := outputs/sweeps/sudoku_sweep
sweep: venv  ## the embedded default: Sudoku 6x6 sweep of the shipped models + AR baselines, Pareto plot
	@pids=""; for lane in $$(echo "$(SWEEP_LANES)" | tr ',' ' '); do \
	  ( for part in $$(echo $$lane | tr '+' ' '); do \
	      $(PY) -m harness.run experiment=$$part '~hydra.callbacks.sweep_summary' || exit 1; done ) & pids="$$pids $$!"; \
	done; status=0; for p in $$pids; do wait $$p || status=1; done; exit $$status
	$(PY) -m harness.pareto $(SWEEP_DIR) --out $(SWEEP_DIR)/summary

# $(call fam_lanes,EXPERIMENT,LANES): one `harness.run experiment=EXPERIMENT` process per lane (a comma list of `fam`
# options, LANES space-separated), all at once, the sweep summary left to the pareto step after; fails if any fails.
fam_lanes = pids=""; for fams in $(2); do \
	  $(PY) -m harness.run experiment=$(1) fam=$$fams '~hydra.callbacks.sweep_summary' & pids="$$pids $$!"; \
	done; status=0; for p in $$pids; do wait $$p || status=1; done; exit $$status

# Masked vs uniform-state vs AR at equal size (docs/families.md): two lanes, one per core (masked samplers | the
# uniform-state samplers and the AR baselines), into one sweep dir; the table, dominance tests and figures at the end.
FAMILIES_MASKED := masked_refine_t095,masked_refine_t07,masked_refine_t05,masked_low_confidence,masked_remdm_r01,masked_remdm_r025
FAMILIES_OTHERS := uniform_b003,uniform_b01,uniform_b03,uniform_b10,uniform_b01_remask01,uniform_default,ar,ar_draft
FAMILIES_DIR := outputs/sweeps/sudoku_families
families: venv  ## masked vs uniform-state vs AR (+ draft) at equal size on the 300 held-out 6x6 puzzles
	@$(call fam_lanes,sudoku_families,$(FAMILIES_MASKED) $(FAMILIES_OTHERS))
	$(PY) -m harness.pareto $(FAMILIES_DIR) --out $(FAMILIES_DIR)/summary

# The field's strategies (samplers/strategies/) on the masked Sudoku model, each over its main knob (4 levels), two
# lanes; the summary draws one front per sampler beside make families' runs when they exist (docs/families.md).
STRATEGIES_LANES := masked_fast_dllm_v2,masked_dparallel,masked_eb_sampler,masked_pc_sampler masked_wino,masked_slowfast,masked_klass
STRATEGIES_DIR := outputs/sweeps/sudoku_strategies
strategies-sweep: venv  ## the field's strategies on the 300 held-out 6x6 puzzles, fronts beside make families' runs
	@$(call fam_lanes,sudoku_strategies,$(STRATEGIES_LANES))
	$(PY) -m harness.pareto $(STRATEGIES_DIR) $(wildcard $(FAMILIES_DIR)) --out $(STRATEGIES_DIR)/summary

search: venv  ## multi-objective sampler search on Sudoku (11 runs) vs the make sweep grid: hypervolume, dominance
	$(PY) -m harness.analysis.search_vs_grid

films: venv  ## denoising films of a run captured with sampler.capture_trajectory=true: make films RUN=<run dir> [N=4]
	test -n "$(RUN)" || { echo "usage: make films RUN=<run dir> [N=4]"; exit 2; }
	$(PY) -m harness.films $(RUN) --samples $(or $(N),4)

pareto: venv  ## redraw Pareto plots + summary table from every run under outputs/
	$(PY) -m harness.pareto outputs/sweeps outputs/runs --out outputs/plots

bench: venv  ## CPU benchmarks (side-by-side ratios), JSON under outputs/bench/
	$(PY) -m bench.cpu.run_all

gpu-plan: venv  ## GPU cost model (roofline arithmetic from the traced ops of the running code; docs/gpu_plan.md), JSON under outputs/bench/
	$(PY) -m bench.gpu.gpu_plan

kernel-build: venv  ## compile the Triton kernels for sm_90 here, no GPU needed: registers, spills, shared memory (bench/gpu/kernel_build.py)
	env -u TRITON_INTERPRET $(PY) -m bench.gpu.kernel_build

gpu-check:  ## one prepared GPU script (docs/gpu_check.md); offline: the machine's torch + wheels in .whl/
	test ! -d .whl || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
	PYTHONPATH=/tmp/site:$(CURDIR) python3 -m bench.gpu.gpu_check

# Needs the hub (code and config files only, no weights) unless CODE_DIR names a folder of the families' code files.
hub-check: venv  ## masked hub families: tiny copies of their own code vs their own generate (docs/masked.md); CODE_DIR=, FAMILIES=, RECORD=1
	HF_HUB_OFFLINE=$(if $(CODE_DIR),1,0) $(PY) -m harness.hub_check $(if $(CODE_DIR),--code-dir $(CODE_DIR)) \
	  $(if $(FAMILIES),--families $(FAMILIES)) $(if $(RECORD),--record docs/hub_revisions.md)

# CODE_DIR: the authors' files, one folder per source (never committed here; docs/samplers.md lists them).
strategies-check: venv  ## ported strategies vs their authors' generate functions (docs/samplers.md); CODE_DIR= (required), STRATEGIES=
	HF_HUB_OFFLINE=1 $(PY) -m harness.strategies_check --code-dir $(CODE_DIR) $(if $(STRATEGIES),--strategies $(STRATEGIES))

clean:
	rm -rf outputs/runs outputs/sweeps outputs/plots
