"""Everything that makes drafts: targets, prompts, collect, draft, losses, train, evaluate, pipeline, publish."""
