"""Figures drawn from the analysis: the Pareto report (`pareto`, `front_figure`, `plot_points`, `plot_labels`,
the interactive `pareto_html`), denoising films (`films`) and MoE expert usage (`experts_plot`). Entry points:
`python -m harness.pareto`, `python -m harness.films`."""
