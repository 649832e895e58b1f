"""Tables and figures of the results (drawn by the notebooks in notebooks/)."""
