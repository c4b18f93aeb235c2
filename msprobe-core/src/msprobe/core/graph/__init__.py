"""Graph view: the module/API hierarchy of a run or of a comparison, as a ``.vis`` file and a web page."""
