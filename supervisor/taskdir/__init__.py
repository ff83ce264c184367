"""The task folder's protocol, one owner per fact: file names (``layout``), statuses
and reasons (``states``), events (``events``), the manifest, the folder itself
(``folder``), operator requests (``control``) and repair of what a crash left.
"""
