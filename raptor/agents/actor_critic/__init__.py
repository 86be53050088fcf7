"""agents/actor_critic"""
