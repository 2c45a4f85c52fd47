"""Views of a model on given text rather than translations: attention maps, sentence vectors
and the scores of given translations."""
