"""Generated text (serving, RL rollouts): what the tokens and their probabilities say about a response."""
