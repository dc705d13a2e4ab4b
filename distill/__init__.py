"""Everything that makes drafts, one subpackage per stage: collect/ -> train/ -> evaluate/ -> publish/.

pipeline.py and sweep.py chain the stages; prompts.py and tracking.py are shared by them. The draft folder
they pass along is read and written by decode.models.draft_folder; the config mechanism is decode.cli.
"""
