"""`placewatch watch`: the fleet from the bus, as a console on a terminal (console.py) and as
text and JSON that scripts read (text.py), both from one board (board.py) of what a FleetView
holds (watched.py); command.py is the command line."""
