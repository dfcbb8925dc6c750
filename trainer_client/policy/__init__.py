"""Running the policy model: loading it, its forward passes beside GRPOTrainer's, and the prefix cache they continue."""
