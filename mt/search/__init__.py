"""Search: greedy, sampling, beam and constrained beam search over a model, and the step-rule
protocol through which restrictions from outside (protected spans, a target language, terms)
reach every search without the search importing them."""
