"""agents/titer"""
